package deletion

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
)

// purge removes the tarball, then the record (leaving a tombstone), once
// every plugin action is finished or the operator forced it. The tarball
// is removed from the storage location the backup recorded.
func (d *Deleter) purge(ctx context.Context, b *backup.Backup, rep *Report, opts Options) (*Report, error) {
	r := b.Resource
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return nil, err
	}
	location := blobstore.ObjectURL(bl.URL(), b.Spec.StorageKey)
	if err := d.mustBeDeleting(ctx, b, rep.Forced); err != nil {
		return nil, err
	}
	if err := d.checkFence(ctx); err != nil {
		return nil, fmt.Errorf("backup %s: not removing the tarball: %w", r.Name, err)
	}
	tarballGone, removed, err := d.purgeFolder(ctx, bl, b)
	if err != nil {
		return nil, err
	}
	info := map[string]any{"tarball": location, "items": rep.TotalItems, "counts": rep.Counts, "removedKeys": removed}
	skipped := d.auditCoverage(b, rep, opts, info)
	reason := cmp.Or(opts.Reason, "every item done or skipped")
	if rep.Forced {
		failed := rep.UnsettledCount - int(rep.NotSent)
		info["abandoned"], info["abandonedSample"] = rep.UnsettledCount, rep.Unsettled
		info["failedOrBlocked"], info["neverSent"] = failed, rep.NotSent
		reason = fmt.Sprintf("forced by the operator with %d items not settled (%d failed or blocked, %d never sent to a plugin)%s",
			rep.UnsettledCount, failed, rep.NotSent, skipped)
		if rep.TarballProblem != "" {
			info["tarballProblem"] = rep.TarballProblem
			reason += "; the tarball was " + rep.TarballProblem
		}
		if rep.SnapshotsProblem != "" {
			info["volumeSnapshotsProblem"] = rep.SnapshotsProblem
			reason += "; the list of native volume snapshots was unusable"
		}
		if rep.SnapshotsSent > 0 {
			info["volumeSnapshotsSent"] = rep.SnapshotsSent
			reason += fmt.Sprintf("; %d native volume snapshots were sent to their plugins", rep.SnapshotsSent)
		}
	}
	details, _ := json.Marshal(info)
	err = d.cfg.Store.Purge(catalog.WithDefaultActor(ctx, "lethe"), r.Key(), catalog.PurgeOptions{
		Force: rep.Forced, Reason: reason, Details: details,
	})
	if err != nil {
		return nil, err
	}
	if err := d.cfg.Store.DeleteProgress(context.WithoutCancel(ctx), r.UID); err != nil && !errors.Is(err, catalog.ErrNotFound) {
		d.log.Warn("removing progress", "backup", r.Name, "error", err)
	}
	rep.Result = ResultPurged
	rep.Purged = []string{"tarball " + location, "catalog record " + r.Key().String()}
	if tarballGone {
		rep.Purged[0] = "no tarball (" + location + " was already gone)"
	}
	rep.Purged = append(rep.Purged, purgedOthers(bl, b, removed)...)
	return rep, nil
}

// mustBeDeleting re-reads the backup before its storage is touched: only
// the same backup, still in Deleting, and held by nothing (Held), may be
// purged.
func (d *Deleter) mustBeDeleting(ctx context.Context, b *backup.Backup, forced bool) error {
	cur, err := d.cfg.Store.Get(ctx, b.Resource.Key())
	if err != nil {
		return fmt.Errorf("backup %s: before purging: %w", b.Name(), err)
	}
	if cur.UID != b.Resource.UID || cur.Phase != catalog.PhaseDeleting {
		return fmt.Errorf("backup %s is %s (uid %s), not the Deleting backup %s: refusing to purge it",
			b.Name(), cur.Phase, cur.UID, b.Resource.UID)
	}
	// Nothing is purged before its blocking dependents, whatever led here.
	_, why, err := d.Held(ctx, cur, forced)
	if err != nil {
		return fmt.Errorf("backup %s: before purging: %w", b.Name(), err)
	}
	if len(why) > 0 {
		return heldError(b.Name(), why)
	}
	return nil
}
