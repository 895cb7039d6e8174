package deletion

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
)

// ConditionLocationUnavailable is True on a backup in Deleting while its
// storage location cannot be read: the daemon parks the deletion (no
// plugin runs, no retry row is charged an attempt, nothing fails) and
// looks again every LocationRecheck; it resumes once the location is
// back. Unknown is not absent: nothing is concluded meanwhile.
const ConditionLocationUnavailable = "LocationUnavailable"

// LocationRecheck is how soon the daemon looks again at a deletion parked
// because its storage location was unavailable.
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
// its storage location: the LocationUnavailable condition, and the work
// item released for LocationRecheck with reason LocationUnavailable,
// before any plugin ran. It returns err.
func (d *Deleter) parkLocation(ctx context.Context, b *backup.Backup, w *catalog.WorkItem, err error) error {
	bg := context.WithoutCancel(ctx)
	d.setLocationCondition(bg, b.Resource, err)
	if rerr := d.cfg.Store.Release(bg, w.Fence(), d.now().Add(LocationRecheck), ConditionLocationUnavailable+": "+err.Error()); rerr != nil && !errors.Is(rerr, catalog.ErrLeaseLost) {
		d.log.Warn("releasing work item", "backup", b.Name(), "error", rerr)
	}
	return err
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
