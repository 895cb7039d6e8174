package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/velero"
)

// Sync actions.
const (
	SyncImported    = "imported"
	SyncWouldImport = "would-import"
	SyncSkipped     = "skipped"
	SyncRejected    = "rejected"
	// SyncUpdated: a backup in the catalog whose velero-backup.json says
	// something new (its phase) was updated.
	SyncUpdated = "updated"
)

// SyncResult is one backup folder's fate in a sync.
type SyncResult struct {
	Kind   string `json:"kind"` // always "SyncResult"
	Name   string `json:"name"`
	Action string `json:"action"` // imported, would-import, skipped, rejected
	Reason string `json:"reason,omitempty"`
	// Warning is set on an import that lacks something, e.g. a tarball
	// without velero-backup.json.
	Warning string `json:"warning,omitempty"`
	Items   int64  `json:"items,omitempty"`
	// Location is the name of the storage location the folder is in.
	Location string `json:"location,omitempty"`
}

// SyncResultKind is SyncResult.Kind.
const SyncResultKind = "SyncResult"

// SyncOptions tune Sync.
type SyncOptions struct {
	// DryRun says what would be imported and changes nothing.
	DryRun bool
	// PruneMissing removes from the catalog, audited, the backups that
	// already had MissingFromStorage and are still not listed.
	PruneMissing bool
	// Progress, when set, is told after each folder of the listing how
	// many of them are done.
	Progress func(done, total int)
	// Checked says the caller has just checked that Blobs answers
	// (storageloc.Check, a one-key listing): Sync does not ask again.
	Checked bool
}

// AnnotationImportedFrom records the storage key a sync imported.
const AnnotationImportedFrom = "lethe.io/imported-from"

// WarningNoMetadata is SyncResult.Warning for a tarball imported without
// a velero-backup.json beside it.
const WarningNoMetadata = "no " + velero.MetadataFile + " beside the tarball: imported without Velero's labels, creation time and TTL"

// folder is what a listing found in one backups/<name>/ folder.
type folder struct {
	name     string
	tarball  *blobstore.Attributes
	metadata *blobstore.Attributes
	// snapshots is the list of native volume snapshots.
	snapshots *blobstore.Attributes
}

// Sync imports the backups found in storage that the catalog does not
// know. Storage is a Velero backup storage location, or a Lethe one laid
// out the same way: each backups/<name>/ folder holds the tarball
// (<name>.tar.gz, or .tar.zst) and, when Velero wrote it,
// velero-backup.json, whose labels, creation time, TTL and expiration,
// phase, storage location and included namespaces are recorded.
//
// The sync filter: a backup in the catalog is never touched, whatever its
// phase (a deletion pending is never undone by a sync), and one that was
// purged (its tombstone remains) is never re-imported. Each tarball is
// validated, and its expected plugins recorded, in one pass; a hostile
// one is reported as rejected, and so is a folder whose velero-backup.json
// cannot be read. A tarball without velero-backup.json is imported with a
// warning; a folder without a tarball is skipped (a failed Velero backup,
// or what a purge interrupted by a crash left).
//
// While some plugin binary cannot be loaded, Sync imports nothing (see
// PluginProblemsError); a dry run still reports.
func (g *Registry) Sync(ctx context.Context, opts SyncOptions) ([]SyncResult, error) {
	if !opts.DryRun {
		if err := g.checkPlugins(); err != nil {
			return nil, err
		}
	}
	// Unknown is not absent: a location that cannot be read (a file://
	// folder that is gone lists as empty) concludes nothing.
	if !opts.Checked {
		if err := blobstore.Check(ctx, g.cfg.Blobs); err != nil {
			return nil, err
		}
	}
	objs, err := g.cfg.Blobs.List(ctx, velero.BackupsDir)
	if err != nil {
		return nil, err
	}
	inCatalog, err := g.catalogBackups(ctx)
	if err != nil {
		return nil, err
	}
	listed := make(map[string]bool, len(objs))
	folders := map[string]*folder{}
	var names []string
	for i := range objs {
		o := &objs[i]
		listed[o.Key] = true
		name, file, ok := velero.SplitKey(o.Key)
		if !ok {
			continue
		}
		f := folders[name]
		if f == nil {
			f = &folder{name: name}
			folders[name] = f
			names = append(names, name)
		}
		switch {
		case file == velero.MetadataFile:
			f.metadata = o
		case file == name+velero.VolumeSnapshotsSuffix:
			f.snapshots = o
		case file == name+backup.ExtGzip, file == name+backup.ExtZstd:
			if f.tarball == nil || file == name+backup.ExtGzip {
				f.tarball = o
			}
		}
	}
	slices.Sort(names)
	results := []SyncResult{}
	for i, name := range names {
		if opts.Progress != nil && i > 0 {
			opts.Progress(i, len(names))
		}
		f := folders[name]
		if f.tarball == nil && f.metadata == nil {
			continue // only sibling files: not a backup of its own
		}
		res := SyncResult{Kind: SyncResultKind, Name: name}
		var skip string
		var known *catalog.Resource
		if r := inCatalog[name]; r != nil {
			skip, known = knownReason(r), r
		} else if skip, known, err = g.syncFilter(ctx, name); err != nil {
			return nil, err
		}
		switch {
		case known != nil && f.metadata != nil:
			res.Action, res.Reason = SyncSkipped, skip
			if err := g.refresh(ctx, known, f, &res, opts); err != nil {
				return nil, err
			}
		case skip != "":
			res.Action, res.Reason = SyncSkipped, skip
		case backup.ValidateNewName(name) != nil:
			res.Action, res.Reason = SyncRejected, backup.ValidateNewName(name).Error()
		case f.tarball == nil:
			res.Action, res.Reason = SyncSkipped, "no tarball beside "+velero.MetadataFile+" (a failed Velero backup, or an interrupted purge)"
		default:
			if err := g.importOne(ctx, f, &res, opts); err != nil {
				return nil, err
			}
		}
		results = append(results, res)
	}
	if opts.Progress != nil && len(names) > 0 {
		opts.Progress(len(names), len(names))
	}
	missing, err := g.checkMissing(ctx, inCatalog, listed, opts)
	if err != nil {
		return nil, err
	}
	return append(results, missing...), nil
}

// knownReason is the sync filter's reason for a backup the catalog has.
func knownReason(r *catalog.Resource) string {
	if r.Phase != catalog.PhaseActive {
		return "deletion pending (" + string(r.Phase) + "): never re-imported"
	}
	return "in the catalog (" + string(r.Phase) + ")"
}

func sortedNames[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// syncFilter says why a tarball named name must not be imported, or "";
// known is the backup's record when the catalog has it (a sync still
// reads its phase).
func (g *Registry) syncFilter(ctx context.Context, name string) (reason string, known *catalog.Resource, err error) {
	r, err := g.cfg.Store.Get(ctx, backup.Key(name))
	switch {
	case err == nil:
		return knownReason(r), r, nil
	case !errors.Is(err, catalog.ErrNotFound):
		return "", nil, err
	}
	queued, err := g.cfg.Store.ListRetries(ctx, catalog.RetryFilter{Key: backup.Key(name).String(), Limit: 1})
	if err != nil {
		return "", nil, err
	}
	if len(queued) > 0 {
		return fmt.Sprintf("in the retry queue (row %d, %s): its deletion is not finished, never re-imported", queued[0].ID, queued[0].State), nil, nil
	}
	ts, err := g.cfg.Store.GetTombstone(ctx, backup.Key(name))
	switch {
	case err == nil:
		return fmt.Sprintf("purged at %s: a deleted backup is never re-imported", ts.PurgedAt.Local().Format(time.RFC3339)), nil, nil
	case errors.Is(err, catalog.ErrNotFound):
		return "", nil, nil
	default:
		return "", nil, err
	}
}

func (g *Registry) importOne(ctx context.Context, f *folder, res *SyncResult, opts SyncOptions) error {
	var meta *velero.Backup
	var raw []byte
	if f.metadata != nil {
		m, data, err := g.readMetadata(ctx, f)
		if err != nil {
			res.Action, res.Reason = SyncRejected, err.Error()
			return nil
		}
		meta, raw = m, data
	} else {
		res.Warning = WarningNoMetadata
	}
	// A create's upload is the create's to register. Looked up here, not
	// in the listing: the create stores its marker before the tarball,
	// so a tarball listed is either beside its marker or registered.
	if reason, err := g.uploadInProgress(ctx, f.name); err != nil {
		return err
	} else if reason != "" {
		res.Action, res.Reason, res.Warning = SyncSkipped, reason, ""
		return nil
	}
	key := f.tarball.Key
	// The identity recorded is the one of the object scanned: the read is
	// pinned to what Stat reported.
	a, err := g.cfg.Blobs.Stat(ctx, key)
	if errors.Is(err, blobstore.ErrNotRegular) {
		res.Action, res.Reason = SyncRejected, err.Error()
		return nil
	}
	if err != nil {
		return err
	}
	rc, err := g.cfg.Blobs.OpenVersion(ctx, key, a.Version)
	if errors.Is(err, blobstore.ErrVersionMismatch) {
		res.Action, res.Reason = SyncRejected, "the tarball changed while it was being read; run the sync again"
		return nil
	}
	if err != nil {
		return err
	}
	sc, verr := g.scan(rc)
	rc.Close()
	if verr != nil {
		res.Action, res.Reason = SyncRejected, verr.Error()
		return nil
	}
	res.Items = sc.sum.Items
	// The native volume snapshots the backup took are items too: a list
	// that cannot be read is reported, never taken for an empty one.
	snaps := &backup.VolumeSnapshotsInfo{}
	if f.snapshots != nil {
		items, info, err := backup.ReadVolumeSnapshots(ctx, g.cfg.Blobs, f.snapshots.Key)
		if err != nil {
			res.Action, res.Reason = SyncRejected, err.Error()
			return nil
		}
		snaps = info
		sc.addSnapshots(g.cfg.Plugins.Plugins(), sc.sum.Items, items)
	}
	if opts.DryRun {
		res.Action = SyncWouldImport
		return nil
	}
	b := &backup.Backup{
		Resource: &catalog.Resource{Kind: backup.Kind, Name: res.Name, Annotations: map[string]string{AnnotationImportedFrom: key}},
		Spec:     g.spec(key, a.Size, a.Version, sc),
	}
	b.Spec.VolumeSnapshots = snaps
	if meta != nil {
		applyMetadata(b, meta, f.metadata, raw)
	}
	if err := b.Encode(); err != nil {
		return err
	}
	if _, err := g.cfg.Store.Create(ctx, b.Resource); errors.Is(err, catalog.ErrAlreadyExists) {
		res.Action, res.Reason = SyncSkipped, "registered meanwhile by another process"
		return nil
	} else if err != nil {
		return err
	}
	res.Action = SyncImported
	return nil
}

// readMetadata reads and checks a folder's velero-backup.json, and
// returns it parsed and as read; the error says why it cannot be used,
// for the report.
func (g *Registry) readMetadata(ctx context.Context, f *folder) (*velero.Backup, []byte, error) {
	if f.metadata.Size > velero.MaxMetadataSize {
		return nil, nil, fmt.Errorf("%s is larger than %d bytes (a real one is a few KiB); not importing it", velero.MetadataFile, velero.MaxMetadataSize)
	}
	rc, err := g.cfg.Blobs.Open(ctx, f.metadata.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("%s unreadable: %w", velero.MetadataFile, err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, velero.MaxMetadataSize+1))
	rc.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("%s unreadable: %w", velero.MetadataFile, err)
	}
	m, err := velero.ParseBackup(data, f.name)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(m.Metadata.Labels)) {
		if err := backup.ValidateLabel(k, m.Metadata.Labels[k]); err != nil {
			return nil, nil, fmt.Errorf("%s: metadata.labels: %w", velero.MetadataFile, err)
		}
	}
	return m, data, nil
}

// applyMetadata records what velero-backup.json says of the backup, and
// the file itself (raw), with its listing attributes (attrs).
func applyMetadata(b *backup.Backup, m *velero.Backup, attrs *blobstore.Attributes, raw []byte) {
	key := attrs.Key
	if len(m.Metadata.Labels) > 0 {
		b.Resource.Labels = maps.Clone(m.Metadata.Labels)
	}
	if c := m.CreatedAt(); !c.IsZero() {
		b.Spec.CreatedAt = &c
	}
	ttl, _ := m.TTL() // ParseBackup checked it
	b.Spec.TTL = backup.Duration(ttl)
	if e := m.ExpiresAt(); !e.IsZero() {
		b.Spec.ExpiresAt = &e
	}
	b.Spec.Velero = &backup.VeleroInfo{
		MetadataKey:        key,
		StorageLocation:    m.Spec.StorageLocation,
		Phase:              m.Status.Phase,
		IncludedNamespaces: m.Spec.IncludedNamespaces,
		UID:                m.Metadata.UID,
		Object:             raw,
		MetadataSize:       attrs.Size,
		MetadataModTime:    attrs.ModTime.UTC(),
	}
}
