package plugin

import (
	"context"
	"encoding/json"
	"time"
)

// DeleteItemAction cleans up what one backup item created outside the backup.
type DeleteItemAction interface {
	// AppliesTo returns the selector of the items this action wants. The
	// host calls it once per process start. A zero ResourceSelector matches
	// every item.
	AppliesTo(ctx context.Context) (ResourceSelector, error)

	// Execute acts on one item. It returns nil when the item is done,
	// Blocked(retryAfter, reason) when it cannot be deleted yet,
	// Skipped(reason) when the action chooses not to act, and any other
	// error when it failed. ctx is cancelled when the host cancels the item
	// (timeout, shutdown). Execute may be called concurrently, and more than
	// once for the same item: it must be idempotent.
	Execute(ctx context.Context, in *DeleteItemActionInput) error
}

// DeleteItemActionInput is what Execute receives.
type DeleteItemActionInput struct {
	// Item is the item from the backup tarball.
	Item Item
	// Backup is the backup being deleted.
	Backup Backup
}

// Item is one item of a backup tarball.
type Item struct {
	// Group is the API group, empty for the core group.
	Group string
	// Version is the API version, e.g. "v1".
	Version string
	// Resource is the plural resource name, e.g. "persistentvolumes".
	Resource string
	// Kind is the object's kind, e.g. "PersistentVolume".
	Kind string
	// Namespace is empty for cluster-scoped items.
	Namespace string
	// Name is the object's name.
	Name string
	// Object is the item's JSON as stored in the tarball. It is owned by
	// the action for the duration of Execute and must not be retained:
	// once Execute returns, the SDK sets it to nil and receives later
	// items into the same bytes. Copy it (bytes.Clone) to keep it. The
	// other fields, strings of their own, may be kept.
	Object []byte
}

// GroupResource returns "resource.group", or "resource" for the core group.
func (i Item) GroupResource() string {
	if i.Group == "" {
		return i.Resource
	}
	return i.Resource + "." + i.Group
}

// Unstructured decodes the item's JSON into a generic map.
func (i Item) Unstructured() (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(i.Object, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// Backup describes the backup being deleted.
//
// A backup has two identities. UID and CreatedAt are Lethe's own: its
// catalog record's UID, and when Lethe registered the backup (for a
// backup imported from a Velero bucket by `lethe backup sync`, the time
// of that sync). SourceUID and SourceCreatedAt are those of the system
// that took the backup: Velero's metadata.uid and
// metadata.creationTimestamp, from velero-backup.json; empty and zero
// for a backup Lethe registered itself (`lethe backup create`).
type Backup struct {
	Name string
	// UID is Lethe's identity of the backup (its catalog record).
	UID         string
	Labels      map[string]string
	Annotations map[string]string
	// CreatedAt is when Lethe registered the backup.
	CreatedAt time.Time
	// ExpiresAt is zero when the backup has no TTL.
	ExpiresAt time.Time
	// StorageLocation is where the backup's tarball lives, as a URL.
	StorageLocation string
	// SourceUID is the backup's uid in the system that took it (Velero's
	// metadata.uid); empty when Lethe registered it.
	SourceUID string
	// SourceCreatedAt is when the system that took the backup created it
	// (Velero's metadata.creationTimestamp); zero when unknown.
	SourceCreatedAt time.Time
}
