package plugin

import (
	"encoding/json"
	"fmt"
)

// Native volume snapshots are the snapshots a Velero backup took through
// its VolumeSnapshotter plugins (not CSI): they live in the cloud, outside
// the cluster and outside the tarball, and Velero lists them in the file
// backups/<name>/<name>-volumesnapshots.json.gz beside the tarball. Lethe
// hands each one to the plugins as an item of its own kind, after the
// tarball's items, so that a plugin can delete the cloud snapshot:
//
//	apiVersion: lethe.io/v1
//	kind:       NativeVolumeSnapshot
//	resource:   nativevolumesnapshots.lethe.io (cluster-scoped)
//
// The item's JSON is a NativeVolumeSnapshot: metadata (a name, and the
// label velero.io/backup-name), and Velero's spec and status as Velero
// wrote them. The group is Lethe's because Lethe makes the object up:
// Velero's volume.Snapshot has no apiVersion or kind, and is no
// Kubernetes resource. The resource name keeps clear of CSI's
// volumesnapshots.snapshot.storage.k8s.io, which a pattern without a dot
// ("volumesnapshots") would otherwise also match.
//
// Like Secrets, these items reach a plugin only when its selector names
// the resource literally in IncludedResources ("nativevolumesnapshots" or
// "nativevolumesnapshots.lethe.io"): a zero selector, "*" or another glob
// never matches them, so that a plugin written for Kubernetes objects
// never receives an object it does not know.
const (
	NativeVolumeSnapshotGroup    = "lethe.io"
	NativeVolumeSnapshotVersion  = "v1"
	NativeVolumeSnapshotKind     = "NativeVolumeSnapshot"
	NativeVolumeSnapshotResource = "nativevolumesnapshots"
	// NativeVolumeSnapshotGroupResource is what a selector names.
	NativeVolumeSnapshotGroupResource = NativeVolumeSnapshotResource + "." + NativeVolumeSnapshotGroup
	// NativeVolumeSnapshotAPIVersion is the object's apiVersion.
	NativeVolumeSnapshotAPIVersion = NativeVolumeSnapshotGroup + "/" + NativeVolumeSnapshotVersion
	// BackupNameLabel is the label, on a NativeVolumeSnapshot item, that
	// names the backup that took the snapshot (Velero's spec.backupName).
	BackupNameLabel = "velero.io/backup-name"
)

// NativeVolumeSnapshot is the JSON of a native volume snapshot item.
// Spec and Status are Velero's volume.Snapshot (v1.18,
// internal/volume/native_snapshot.go) field for field; fields Velero adds
// later are in the item's JSON too (decode it yourself to see them).
type NativeVolumeSnapshot struct {
	APIVersion string                     `json:"apiVersion"`
	Kind       string                     `json:"kind"`
	Metadata   NativeVolumeSnapshotMeta   `json:"metadata"`
	Spec       NativeVolumeSnapshotSpec   `json:"spec"`
	Status     NativeVolumeSnapshotStatus `json:"status"`
}

// NativeVolumeSnapshotMeta is the item's metadata. Name is the
// persistent volume's name (unique in a backup), or "snapshot-<n>" (its
// position in Velero's list, from 0) when that is empty or taken.
type NativeVolumeSnapshotMeta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

// NativeVolumeSnapshotSpec is Velero's SnapshotSpec.
type NativeVolumeSnapshotSpec struct {
	// BackupName and BackupUID name the Velero backup that took it.
	BackupName string `json:"backupName"`
	BackupUID  string `json:"backupUID"`
	// Location is the name of Velero's VolumeSnapshotLocation.
	Location             string `json:"location"`
	PersistentVolumeName string `json:"persistentVolumeName"`
	ProviderVolumeID     string `json:"providerVolumeID"`
	VolumeType           string `json:"volumeType"`
	VolumeAZ             string `json:"volumeAZ,omitempty"`
	VolumeIOPS           *int64 `json:"volumeIOPS,omitempty"`
}

// NativeVolumeSnapshotStatus is Velero's SnapshotStatus. Phase is "New",
// "Completed" or "Failed"; a failed snapshot may have no
// ProviderSnapshotID.
type NativeVolumeSnapshotStatus struct {
	ProviderSnapshotID string `json:"providerSnapshotID,omitempty"`
	Phase              string `json:"phase,omitempty"`
}

// IsNativeVolumeSnapshot reports whether the item is a native volume
// snapshot.
func (i Item) IsNativeVolumeSnapshot() bool {
	return i.Group == NativeVolumeSnapshotGroup && i.Resource == NativeVolumeSnapshotResource
}

// NativeVolumeSnapshot decodes a native volume snapshot item.
func (i Item) NativeVolumeSnapshot() (*NativeVolumeSnapshot, error) {
	if !i.IsNativeVolumeSnapshot() {
		return nil, fmt.Errorf("item %s is not a %s", i.GroupResource(), NativeVolumeSnapshotGroupResource)
	}
	var s NativeVolumeSnapshot
	if err := json.Unmarshal(i.Object, &s); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", NativeVolumeSnapshotKind, i.Name, err)
	}
	return &s, nil
}
