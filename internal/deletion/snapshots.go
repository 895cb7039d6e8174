package deletion

import (
	"context"
	"errors"
	"fmt"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/velero"
)

// loadSnapshots reads the backup's list of native volume snapshots
// (Velero's <name>-volumesnapshots.json.gz beside the tarball), whose
// snapshots the pipeline hands to the plugins as items after the
// tarball's, at ordinals Spec.Items and up. It is read once per run,
// before any plugin runs:
//   - no list (none recorded, or none beside the tarball) is no snapshots;
//   - a list that cannot be parsed, one recorded that is gone, or one
//     whose sha256 differs from the one recorded, is an error wrapping
//     backup.ErrVolumeSnapshotsUnusable: never taken for an empty list;
//   - a list not yet recorded (a backup registered before Lethe read
//     them) is recorded now when pin is set, so that every later run
//     numbers the same snapshots the same way (the watermark counts
//     them).
func (d *Deleter) loadSnapshots(ctx context.Context, b *backup.Backup, pin bool) ([]velero.SnapshotItem, error) {
	key := b.Spec.VolumeSnapshotsKey()
	rec := b.Spec.VolumeSnapshots
	if key == "" {
		return nil, nil
	}
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return nil, err
	}
	items, info, err := backup.ReadVolumeSnapshots(ctx, bl, key)
	switch {
	case errors.Is(err, blobstore.ErrNotFound) && rec == nil:
		info = &backup.VolumeSnapshotsInfo{}
	case errors.Is(err, blobstore.ErrNotFound):
		return nil, fmt.Errorf("backup %s: %w: %s listed %s at registration and is gone; "+
			"no plugin runs and nothing is purged until it is back (or abandon the backup with --abandon)",
			b.Name(), backup.ErrVolumeSnapshotsUnusable, blobstore.ObjectURL(bl.URL(), key), plural(int(rec.Count), "native volume snapshot"))
	case err != nil:
		return nil, fmt.Errorf("backup %s: %w; no plugin runs and nothing is purged until it is fixed (or abandon the backup with --abandon)", b.Name(), err)
	case rec != nil && rec.Digest != info.Digest:
		return nil, fmt.Errorf("backup %s: %w: %s has sha256 %s, but sha256 %s was recorded (%d snapshots); "+
			"its snapshots may not be this backup's, so no plugin runs and nothing is purged",
			b.Name(), backup.ErrVolumeSnapshotsUnusable, blobstore.ObjectURL(bl.URL(), key), info.Digest, rec.Digest, rec.Count)
	}
	if rec == nil && pin {
		if err := d.recordSnapshots(ctx, b, info); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// recordSnapshots writes info into the backup's spec (and b).
func (d *Deleter) recordSnapshots(ctx context.Context, b *backup.Backup, info *backup.VolumeSnapshotsInfo) error {
	for range 3 {
		cur, err := d.cfg.Store.Get(ctx, b.Resource.Key())
		if err != nil {
			return err
		}
		cb, err := backup.FromResource(cur)
		if err != nil {
			return err
		}
		if cur.UID != b.Resource.UID {
			return fmt.Errorf("backup %s changed (uid %s, was %s)", b.Name(), cur.UID, b.Resource.UID)
		}
		if cb.Spec.VolumeSnapshots != nil {
			if *cb.Spec.VolumeSnapshots != *info {
				return fmt.Errorf("backup %s: %w: another run recorded another list", b.Name(), backup.ErrVolumeSnapshotsUnusable)
			}
			b.Spec.VolumeSnapshots = info
			return nil
		}
		cb.Spec.VolumeSnapshots = info
		if err := cb.Encode(); err != nil {
			return err
		}
		if _, err := d.cfg.Store.Update(ctx, cur); errors.Is(err, catalog.ErrConflict) {
			continue
		} else if err != nil {
			return err
		}
		b.Spec.VolumeSnapshots = info
		return nil
	}
	return fmt.Errorf("backup %s: recording its volume snapshot list: %w", b.Name(), catalog.ErrConflict)
}

// recordedSnapshots is how many native volume snapshots the backup
// recorded (0 when none, or never looked at).
func recordedSnapshots(b *backup.Backup) int64 {
	if b.Spec.VolumeSnapshots == nil {
		return 0
	}
	return b.Spec.VolumeSnapshots.Count
}
