package deletion

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// ConditionLocationUnavailable is True on a backup in Deleting while its
// storage location cannot be read: the daemon parks the deletion (no
// plugin runs, nothing fails) as a row of the retry queue (kind
// retry.KindLocation, item "location:NAME", reason LocationUnavailable),
// which is never charged an attempt and is looked at again on the
// queue's backoff (RecheckLocation) without claiming the deletion's work
// item; once the location is back, the row goes and the deletion
// resumes. Unknown is not absent: nothing is concluded meanwhile.
const ConditionLocationUnavailable = "LocationUnavailable"

// LocationRecheck is how soon the daemon looks again at a deletion parked
// because its storage location was unavailable, when its retry row could
// not be written (the work item is then released for that long).
const LocationRecheck = time.Minute

// checkLocation says whether the backup's storage location can be read
// now; the error wraps blobstore.ErrUnavailable.
func (d *Deleter) checkLocation(ctx context.Context, b *backup.Backup) error {
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return err
	}
	return blobstore.Check(ctx, bl)
}

// parkLocation records, for the daemon, that a claimed deletion waits for
// its storage location, before any plugin ran: the LocationUnavailable
// condition, a retry row of kind retry.KindLocation (not an attempt),
// and the work item released until the row's recheck finds the location
// back (RecheckLocation). It returns err.
func (d *Deleter) parkLocation(ctx context.Context, b *backup.Backup, w *catalog.WorkItem, err error) error {
	bg := context.WithoutCancel(ctx)
	d.setLocationCondition(bg, b.Resource, err)
	until := d.now().Add(ParkedFor)
	if werr := d.waitLocation(bg, b, err); werr != nil {
		d.log.Warn("recording a deletion that waits for its storage location in the retry queue; the deletion is looked at again as a whole", "backup", b.Name(), "error", werr)
		until = d.now().Add(LocationRecheck)
	}
	if rerr := d.cfg.Store.Release(bg, w.Fence(), until, ConditionLocationUnavailable+": "+err.Error()); rerr != nil && !errors.Is(rerr, catalog.ErrLeaseLost) {
		d.log.Warn("releasing work item", "backup", b.Name(), "error", rerr)
	}
	return err
}

// locationWait is the retry-queue row of a deletion waiting for the
// backup's storage location.
func locationWait(b *backup.Backup, msg string) retry.Outcome {
	name := b.Spec.Location
	if name == "" {
		name = b.Spec.StorageLocation
	}
	if name == "" {
		name = "default"
	}
	return retry.Outcome{Kind: retry.KindLocation, Owner: b.Resource.Key(), UID: b.Resource.UID, ItemID: "location:" + name,
		Result: retry.OutcomeWaiting, Message: msg}
}

// waitLocation creates or refreshes the backup's location row, with the
// reason, not charged an attempt.
func (d *Deleter) waitLocation(ctx context.Context, b *backup.Backup, err error) error {
	_, werr := d.cfg.Retry.Wait(ctx, locationWait(b, ConditionLocationUnavailable+": "+err.Error()))
	return werr
}

// clearLocationWait removes the backup's location row, if any.
func (d *Deleter) clearLocationWait(ctx context.Context, b *backup.Backup) {
	id := locationWait(b, "").Identity()
	if err := d.cfg.Retry.Succeed(ctx, b.Resource.Key(), b.Resource.UID, []catalog.RetryIdentity{id}); err != nil {
		d.log.Warn("clearing the storage location's retry row", "backup", b.Name(), "error", err)
	}
}

// RecheckLocation is the retry queue's look at a deletion parked because
// its storage location was unavailable (rows of kind retry.KindLocation;
// the daemon's collector calls it when the row is due). It never claims
// the deletion's work item while the location is still unavailable: it
// refreshes the row, which the queue puts off on its backoff, and
// returns (nil, nil). Once the location is back, it clears the condition
// and the row, claims the work item and runs it (RunWork). A
// backup that is gone or no longer Deleting just loses its rows.
func (d *Deleter) RecheckLocation(ctx context.Context, uid string, opts Options) (*Report, error) {
	r, err := d.cfg.Store.GetByUID(ctx, uid)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b, err := backup.FromResource(r)
	if err != nil {
		return nil, err
	}
	if r.Phase != catalog.PhaseDeleting {
		d.clearLocationWait(ctx, b)
		return nil, nil
	}
	if err := d.checkLocation(ctx, b); errors.Is(err, blobstore.ErrUnavailable) {
		d.setLocationCondition(ctx, r, err)
		return nil, d.waitLocation(ctx, b, err)
	}
	// Back: the row has done its part; the deletion's work item is
	// claimed now (once, for the run), and RunWork decides as the
	// daemon's work loop would (and parks it again, should the location
	// go away meanwhile).
	d.setLocationCondition(ctx, r, nil)
	d.clearLocationWait(ctx, b)
	if _, err := d.cfg.Store.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: uid, RunAt: d.now()}); err != nil {
		return nil, err
	}
	w, err := d.claim(ctx, uid)
	if err != nil {
		return nil, err
	}
	return d.RunWork(ctx, w, opts)
}

// setLocationCondition sets (err != nil) or clears LocationUnavailable;
// it writes only when the condition changes.
func (d *Deleter) setLocationCondition(ctx context.Context, r *catalog.Resource, err error) {
	want := catalog.Condition{Type: ConditionLocationUnavailable, Status: "False", Reason: "LocationAvailable", LastTransitionTime: d.now()}
	if err != nil {
		want.Status, want.Reason, want.Message = "True", ConditionLocationUnavailable, err.Error()
	}
	d.recordCondition(ctx, r, want, err != nil)
}

// recordCondition writes want on r's current version, retrying a lost
// race a few times: a condition that is absent and not set (set false)
// stays absent, and one already as wanted is not written again.
func (d *Deleter) recordCondition(ctx context.Context, r *catalog.Resource, want catalog.Condition, set bool) {
	for range 3 {
		cur, gerr := d.cfg.Store.Get(ctx, r.Key())
		if gerr != nil {
			return
		}
		i := slices.IndexFunc(cur.Conditions, func(c catalog.Condition) bool { return c.Type == want.Type })
		if i < 0 && !set {
			return
		}
		if i >= 0 && cur.Conditions[i].Status == want.Status && cur.Conditions[i].Message == want.Message {
			return
		}
		setCondition(cur, want)
		if _, uerr := d.cfg.Store.Update(ctx, cur); uerr == nil || !errors.Is(uerr, catalog.ErrConflict) {
			if uerr != nil {
				d.log.Warn("recording the "+want.Type+" condition", "backup", r.Name, "error", uerr)
			}
			return
		}
	}
}
