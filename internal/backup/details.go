package backup

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
)

// What `lethe backup describe NAME --details` adds to a backup's
// description, as `velero backup describe --details` does: the backup's
// resource list, read from its tarball; its native volume snapshots, read
// from their list; and, once a deletion ran, each plugin's item outcomes.
// Every list is bounded: at most a given number of names per resource
// type, of unsettled items per plugin, the rest counted.

// DefaultDetailNames is how many names --details shows per resource
// type (and unsettled items per plugin).
const DefaultDetailNames = 20

// Details is the detail of one backup.
type Details struct {
	// NamesPerType is the bound on the names of each resource type and
	// the unsettled items of each plugin.
	NamesPerType int `json:"namesPerType"`
	// ResourceList is the tarball's items by type, sorted by Velero's
	// key; ResourceListError says why there is none.
	ResourceList      []ResourceType `json:"resourceList"`
	ResourceListError string         `json:"resourceListError,omitempty"`
	// VolumeSnapshots are the backup's native volume snapshots (none:
	// empty); VolumeSnapshotsError says why they could not be read.
	VolumeSnapshots      []VolumeSnapshot `json:"volumeSnapshots"`
	VolumeSnapshotsError string           `json:"volumeSnapshotsError,omitempty"`
	// PluginOutcomes are each plugin's item outcomes once a deletion
	// ran, by plugin name (none: empty).
	PluginOutcomes []PluginOutcomes `json:"pluginOutcomes"`
}

// ResourceType is one type of the resource list.
type ResourceType struct {
	// Key is Velero's key of the type in its resource list: group (none
	// for the core group), version and kind ("apps/v1/Deployment",
	// "v1/Pod").
	Key string `json:"key"`
	// GroupResource is Lethe's name of it ("deployments.apps", "pods").
	GroupResource string `json:"groupResource"`
	Count         int64  `json:"count"`
	// Names are the first items' "namespace/name" (or "name" for a
	// cluster-scoped item), in tarball order; More counts the others.
	Names []string `json:"names"`
	More  int64    `json:"more,omitempty"`
}

// VolumeSnapshot is one native volume snapshot, with what Velero's
// describe prints of it.
type VolumeSnapshot struct {
	Name             string `json:"name"`
	SnapshotID       string `json:"snapshotID,omitempty"`
	VolumeID         string `json:"volumeID,omitempty"`
	Type             string `json:"type,omitempty"`
	AvailabilityZone string `json:"availabilityZone,omitempty"`
	IOPS             *int64 `json:"iops,omitempty"`
	Phase            string `json:"phase,omitempty"`
}

// PluginOutcomes is what a deletion's plugin did to the backup's items.
type PluginOutcomes struct {
	Plugin string `json:"plugin"`
	catalog.OutcomeCount
	// Unsettled are its failed and blocked items, the first of them;
	// MoreUnsettled counts the others.
	Unsettled     []catalog.ItemOutcome `json:"unsettled,omitempty"`
	MoreUnsettled int                   `json:"moreUnsettled,omitempty"`
}

// ReadDetails reads the detail of b from bl, the store of its location:
// its tarball and its volume snapshot list. A file that cannot be read
// is said in the Details (ResourceListError, VolumeSnapshotsError), not
// returned: the rest is still shown. progress and unsettled are the
// deletion's (nil: none ran). names bounds every list (at least 1).
// bl is nil when the location could not be opened (openErr says why).
func ReadDetails(ctx context.Context, bl blobstore.Store, openErr error, b *Backup, progress *catalog.DeletionProgress, unsettled []catalog.ItemOutcome, names int) *Details {
	names = max(names, 1)
	d := &Details{NamesPerType: names, ResourceList: []ResourceType{}, VolumeSnapshots: []VolumeSnapshot{}, PluginOutcomes: []PluginOutcomes{}}
	d.PluginOutcomes = pluginOutcomes(progress, unsettled, names)
	if bl == nil {
		d.ResourceListError = openErr.Error()
		d.VolumeSnapshotsError = openErr.Error()
		return d
	}
	list, err := resourceList(ctx, bl, &b.Spec, names)
	if err != nil {
		d.ResourceListError = err.Error()
	} else {
		d.ResourceList = list
	}
	if key := b.Spec.VolumeSnapshotsKey(); key != "" {
		items, _, err := ReadVolumeSnapshots(ctx, bl, key)
		switch {
		case errors.Is(err, blobstore.ErrNotFound) && b.Spec.VolumeSnapshots == nil:
			// A Velero folder without a list: no native snapshots.
		case err != nil:
			d.VolumeSnapshotsError = err.Error()
		default:
			for _, it := range items {
				d.VolumeSnapshots = append(d.VolumeSnapshots, volumeSnapshot(it.Name, it.Object))
			}
		}
	}
	return d
}

// resourceList streams the tarball and counts its items by type, keeping
// the first names of each.
func resourceList(ctx context.Context, bl blobstore.Store, s *Spec, names int) ([]ResourceType, error) {
	rc, err := bl.Open(ctx, s.StorageKey)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, fmt.Errorf("tarball %s not found", blobstore.ObjectURL(bl.URL(), s.StorageKey))
	}
	if err != nil {
		return nil, fmt.Errorf("tarball %s: %w", blobstore.ObjectURL(bl.URL(), s.StorageKey), err)
	}
	defer rc.Close()
	rd, err := archive.NewReader(rc, archive.Limits{})
	if err != nil {
		return nil, fmt.Errorf("tarball %s: %w", s.StorageKey, err)
	}
	defer rd.Close()
	rd.SkipLabels()
	byKey := map[string]*ResourceType{}
	var it archive.Item
	for {
		item, err := rd.NextInto(&it)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tarball %s: %w", s.StorageKey, err)
		}
		key := item.Version + "/" + item.Kind
		if item.Group != "" {
			key = item.Group + "/" + key
		}
		t := byKey[key]
		if t == nil {
			t = &ResourceType{Key: key, GroupResource: item.GroupResource(), Names: []string{}}
			byKey[key] = t
		}
		t.Count++
		if len(t.Names) < names {
			name := item.Name
			if item.Namespace != "" {
				name = item.Namespace + "/" + name
			}
			t.Names = append(t.Names, name)
		} else {
			t.More++
		}
		rd.Recycle(item)
	}
	if s.Digest != "" && rd.Digest() != s.Digest {
		return nil, fmt.Errorf("tarball %s is not the one registered (sha256 %s, registered %s)", s.StorageKey, rd.Digest(), s.Digest)
	}
	out := make([]ResourceType, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		out = append(out, *byKey[k])
	}
	return out, nil
}

// volumeSnapshot reads what Velero's describe prints of a native volume
// snapshot from its object (a Velero volume.Snapshot).
func volumeSnapshot(name string, object []byte) VolumeSnapshot {
	var o struct {
		Spec struct {
			PersistentVolumeName string `json:"persistentVolumeName"`
			ProviderVolumeID     string `json:"providerVolumeID"`
			VolumeType           string `json:"volumeType"`
			VolumeAZ             string `json:"volumeAZ"`
			VolumeIOPS           *int64 `json:"volumeIOPS"`
		} `json:"spec"`
		Status struct {
			ProviderSnapshotID string `json:"providerSnapshotID"`
			Phase              string `json:"phase"`
		} `json:"status"`
	}
	_ = json.Unmarshal(object, &o) // the list was validated; a field it lacks stays empty
	return VolumeSnapshot{
		Name: cmp.Or(o.Spec.PersistentVolumeName, name), SnapshotID: o.Status.ProviderSnapshotID, VolumeID: o.Spec.ProviderVolumeID,
		Type: o.Spec.VolumeType, AvailabilityZone: o.Spec.VolumeAZ, IOPS: o.Spec.VolumeIOPS, Phase: o.Status.Phase,
	}
}

// pluginOutcomes is each plugin's counts and first unsettled items, by
// plugin name; a plugin with unsettled items and no count is listed too.
func pluginOutcomes(p *catalog.DeletionProgress, unsettled []catalog.ItemOutcome, names int) []PluginOutcomes {
	by := map[string]*PluginOutcomes{}
	get := func(name string) *PluginOutcomes {
		if by[name] == nil {
			by[name] = &PluginOutcomes{Plugin: name}
		}
		return by[name]
	}
	if p != nil {
		for name, c := range p.Counts {
			get(name).OutcomeCount = c
		}
	}
	for _, o := range unsettled {
		po := get(o.Plugin)
		if len(po.Unsettled) < names {
			po.Unsettled = append(po.Unsettled, o)
		} else {
			po.MoreUnsettled++
		}
	}
	out := []PluginOutcomes{}
	for _, name := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[name])
	}
	return out
}
