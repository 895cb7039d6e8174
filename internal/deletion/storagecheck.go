package deletion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/velero"
)

// A backup's row says where its storage is (spec.storageLocation and
// spec.storageKey), and a purge deletes there. Whoever can write the
// catalog can write a row, so the row is never enough: the location must
// be one Lethe is configured with, and the key the backup's own tarball in
// Velero's layout, and its velero-backup.json (spec.velero.metadataKey)
// the one beside it. Otherwise nothing is read or deleted, the backup gets
// the StorageRefused condition, and the refusal is audited.

// ErrStorageRefused means a backup's row names storage that is not its
// own: a location Lethe is not configured with, a key that is not
// backups/<name>/<name>.tar.gz (or .tar.zst), or a velero-backup.json key
// that is not backups/<name>/velero-backup.json. Nothing was read or deleted.
var ErrStorageRefused = errors.New("storage refused")

// ConditionStorageRefused is True on a backup whose row names storage that
// is not its own (ErrStorageRefused): the daemon parks its deletion until
// an operator acts.
const ConditionStorageRefused = "StorageRefused"

// AuditDeletionRefused is the audit action of a deletion refused because
// the backup's row names storage that is not its own.
const AuditDeletionRefused = "deletion-refused"

// StorageRefusedError says which part of a backup's row was refused.
// errors.Is(err, ErrStorageRefused) holds.
type StorageRefusedError struct {
	Backup string
	// Reason is UnknownLocation, ForeignStorageKey or ForeignMetadataKey.
	Reason string
	detail string
}

func (e *StorageRefusedError) Error() string {
	return fmt.Sprintf("backup %s: %s; refusing to read or delete anything for it (a catalog row alone never says where to delete)",
		termtext.Quote(e.Backup), e.detail)
}

// Is makes errors.Is(err, ErrStorageRefused) true.
func (e *StorageRefusedError) Is(target error) bool { return target == ErrStorageRefused }

// checkStorage refuses a backup whose row names storage that is not its
// own, before any of it is opened.
func (d *Deleter) checkStorage(b *backup.Backup) error {
	name, key := b.Name(), b.Spec.StorageKey
	own := backup.ValidateName(name) == nil &&
		(key == backup.StorageKeyExt(name, backup.ExtGzip) || key == backup.StorageKeyExt(name, backup.ExtZstd))
	if !own {
		return &StorageRefusedError{Backup: name, Reason: "ForeignStorageKey",
			detail: "its storage key " + termtext.Quote(key) + " is not its own tarball (" + backup.StorageKeyExt(name, backup.ExtGzip) + " or " + backup.ExtZstd + ")"}
	}
	if v := b.Spec.Velero; v != nil && v.MetadataKey != "" && v.MetadataKey != velero.MetadataKey(name) {
		return &StorageRefusedError{Backup: name, Reason: "ForeignMetadataKey",
			detail: "its " + velero.MetadataFile + " key " + termtext.Quote(v.MetadataKey) + " is not its own (" + velero.MetadataKey(name) + ")"}
	}
	if !d.cfg.Locations.Known(b.Spec.StorageLocation) {
		return &StorageRefusedError{Backup: name, Reason: "UnknownLocation",
			detail: "its storage location " + termtext.Quote(b.Spec.StorageLocation) + " is not one Lethe is configured with (--storage, --location)"}
	}
	return nil
}

// storageRefused says whether err refuses the storage a row names.
func storageRefused(err error) bool {
	return errors.Is(err, ErrStorageRefused) || errors.Is(err, blobstore.ErrUnknownLocation)
}

// refuseStorage records a refusal of the backup's storage: the
// StorageRefused condition, an audit entry and a log line.
func (d *Deleter) refuseStorage(ctx context.Context, b *backup.Backup, err error) {
	ctx = catalog.WithDefaultActor(context.WithoutCancel(ctx), "lethe")
	d.log.Info("refusing a deletion: the backup's row names storage that is not its own", "backup", b.Name(),
		"storageLocation", b.Spec.StorageLocation, "storageKey", b.Spec.StorageKey, "error", err)
	reason := "UnknownLocation"
	var se *StorageRefusedError
	if errors.As(err, &se) {
		reason = se.Reason
	}
	d.recordCondition(ctx, b.Resource, catalog.Condition{Type: ConditionStorageRefused, Status: "True", Reason: reason,
		Message: err.Error() + "; the daemon will not retry it", LastTransitionTime: d.now()}, true)
	details, _ := json.Marshal(map[string]string{"storageLocation": b.Spec.StorageLocation, "storageKey": b.Spec.StorageKey})
	if aerr := d.cfg.Store.AppendAudit(ctx, catalog.AuditEntry{Time: d.now().UTC(), Action: AuditDeletionRefused,
		Kind: backup.Kind, Name: b.Name(), UID: b.Resource.UID, Reason: err.Error(), Details: details}); aerr != nil {
		d.log.Warn("auditing a refused deletion", "backup", b.Name(), "error", aerr)
	}
}
