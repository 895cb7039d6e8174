package deletion

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
)

const maxReportedUnsettled = 20

// ErrInterrupted means a run stopped before its end with its progress
// saved: a signal, or a download of the tarball that broke and could not
// be resumed. Running the deletion again resumes it.
var ErrInterrupted = errors.New("deletion interrupted")

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// Run executes the deletion of a backup that is in Deleting: it claims the
// deletion's lease, streams the items not yet settled through the plugins,
// and purges the tarball and the record when every item is done or
// skipped. Run is idempotent and resumes from the last checkpoint. When
// another process holds the lease, Run says who, and until when.
func (d *Deleter) Run(ctx context.Context, name string, opts Options) (*Report, error) {
	b, err := d.get(ctx, name)
	if err != nil {
		return nil, err
	}
	if b.Resource.Phase != catalog.PhaseDeleting {
		return nil, fmt.Errorf("backup %s is %s, not Deleting", name, b.Resource.Phase)
	}
	skipped, err := d.checkPlugins(ctx, b, opts)
	if err != nil {
		return nil, err
	}
	opts.skipped = skipped
	d.setPluginCondition(ctx, b.Resource, nil)
	if _, err := d.cfg.Store.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: b.Resource.UID, RunAt: d.now()}); err != nil {
		return nil, err
	}
	w, err := d.claim(ctx, b.Resource.UID)
	if err != nil {
		var held *catalog.LeaseHeldError
		if errors.As(err, &held) {
			return nil, fmt.Errorf("backup %s is already being deleted by %s (lease until %s)",
				name, held.Holder, held.ExpiresAt.Local().Format(time.RFC3339))
		}
		return nil, err
	}
	return d.runLeased(ctx, b, w, opts)
}

// ErrStaleWork means a deletion work item names a backup that is not in
// Deleting. RunWork removes such an item without touching the backup.
var ErrStaleWork = errors.New("stale deletion work item")

// RunWork executes a deletion work item this process has claimed (see
// catalog.Store.Claim); the daemon uses it. A work item whose backup is
// gone is complete; one whose backup is not Deleting is stale: it is
// removed, nothing else changes, and the error says so.
func (d *Deleter) RunWork(ctx context.Context, w *catalog.WorkItem, opts Options) (*Report, error) {
	r, err := d.cfg.Store.GetByUID(ctx, w.Key)
	if errors.Is(err, catalog.ErrNotFound) {
		// Purged already: the work is done.
		return nil, d.cfg.Store.Complete(ctx, w.Fence())
	}
	if err != nil {
		return nil, err
	}
	if r.Kind != backup.Kind || r.Phase != catalog.PhaseDeleting {
		stale := fmt.Errorf("%w: %s %s is %s, not Deleting; the work item was removed and nothing else changed",
			ErrStaleWork, r.Kind, r.Name, r.Phase)
		return nil, errors.Join(stale, d.cfg.Store.Complete(ctx, w.Fence()))
	}
	b, err := backup.FromResource(r)
	if err != nil {
		return nil, err
	}
	skipped, err := d.checkPlugins(ctx, b, opts)
	if err != nil {
		return nil, d.refusePlugins(ctx, b, w, err)
	}
	opts.skipped = skipped
	d.setPluginCondition(ctx, r, nil)
	if err := d.checkLocation(ctx, b); errors.Is(err, blobstore.ErrUnavailable) {
		return nil, d.parkLocation(ctx, b, w, err)
	}
	d.setLocationCondition(ctx, r, nil)
	d.clearLocationWait(ctx, b)
	return d.runLeased(ctx, b, w, opts)
}

// runLeased runs the deletion under the claim w: every catalog write of
// the run is fenced by that claim, so a run that lost its lease (expired,
// or claimed again, even by this process) writes nothing more.
func (d *Deleter) runLeased(ctx context.Context, b *backup.Backup, w *catalog.WorkItem, opts Options) (*Report, error) {
	name := b.Name()
	fence := w.Fence()
	runCtx, cancel := context.WithCancelCause(catalog.WithFence(ctx, fence))
	defer cancel(nil)
	renewDone := d.keepLease(runCtx, cancel, w)
	rep, runErr := d.run(runCtx, b, w, opts)
	leaseErr := context.Cause(runCtx)
	cancel(nil)
	<-renewDone
	// Leave the work item for a later run unless the deletion finished.
	bg := context.WithoutCancel(ctx)
	if runErr == nil && rep.Result == ResultWaiting {
		// The collector resumes it once the wait is over (Resume); the
		// recheck is only a safety net.
		msg := "waiting for " + joinWhy(rep.WaitingFor)
		if err := d.cfg.Store.Release(bg, fence, d.now().Add(WaitRecheck), msg); err != nil && !errors.Is(err, catalog.ErrLeaseLost) {
			d.log.Warn("releasing work item", "backup", name, "error", err)
		}
	} else if runErr == nil && rep.Result == ResultPurged {
		if err := d.cfg.Store.Complete(bg, fence); err != nil && !errors.Is(err, catalog.ErrNotFound) {
			d.log.Warn("completing work item", "backup", name, "error", err)
		}
		d.retryFinished(bg, b, rep)
	} else {
		msg, next := "", d.nextRun(bg, b, rep, runErr, w)
		if tarballUnusable(runErr) || storageRefused(runErr) {
			// Retrying changes nothing until the tarball is back, or the
			// operator abandons the items: the daemon leaves it parked
			// (the backup's condition says why), and an explicit delete
			// claims it by key whatever its run time.
			next = d.now().Add(ParkedFor)
		}
		if runErr != nil {
			msg = runErr.Error()
		} else {
			msg = fmt.Sprintf("%d items unsettled", rep.UnsettledCount)
		}
		if err := d.cfg.Store.Release(bg, fence, next, msg); err != nil && !errors.Is(err, catalog.ErrLeaseLost) {
			d.log.Warn("releasing work item", "backup", name, "error", err)
		}
	}
	if runErr != nil {
		if leaseErr != nil && !errors.Is(leaseErr, context.Canceled) {
			return nil, leaseErr
		}
		return nil, runErr
	}
	return rep, nil
}

func (d *Deleter) run(ctx context.Context, b *backup.Backup, w *catalog.WorkItem, opts Options) (*Report, error) {
	r := b.Resource
	rep := &Report{Backup: r.Name}
	fence := w.Fence()
	if err := checkFinished(b); err != nil {
		return nil, err
	}
	// The row is checked before anything else, whatever its finalizers:
	// a row written into the catalog must not pick what a purge deletes.
	if err := d.checkStorage(b); err != nil {
		d.refuseStorage(ctx, b, err)
		return nil, err
	}
	if err := d.checkWritable(b); err != nil {
		return nil, err
	}

	if slices.Contains(r.Finalizers, catalog.FinalizerDeleteActions) {
		sum, err := d.validate(ctx, b)
		d.noteTarball(ctx, b, err, opts)
		if tarballUnusable(err) && opts.ForcePurge {
			// The tarball's items cannot reach the plugins: the forced
			// purge abandons every one they had not finished, including
			// those never sent. The native volume snapshots, listed in a
			// file of their own, are still sent; only those that could
			// not be sent, or did not settle, are abandoned.
			pending, problem, perr := d.snapshotsWithoutTarball(ctx, b, true)
			if perr != nil {
				return nil, perr
			}
			if err := d.abandonAll(ctx, b, rep, err); err != nil {
				return nil, err
			}
			if problem != nil {
				rep.SnapshotsProblem = problem.Error()
			}
			if err := d.sendSnapshots(ctx, b, pending, rep); err != nil {
				return nil, err
			}
			nr, why, err := d.Held(ctx, r, true)
			if err != nil {
				return nil, err
			}
			b.Resource = nr
			if len(why) > 0 {
				return d.waiting(ctx, nr, rep, why), nil
			}
			d.log.Warn("force-purging a backup whose tarball is "+rep.TarballProblem, "backup", r.Name,
				"notSettled", rep.UnsettledCount, "neverSent", rep.NotSent)
			return d.purge(ctx, b, rep, opts)
		}
		if err != nil {
			return nil, err
		}
		snaps, serr := d.loadSnapshots(ctx, b, true)
		if serr != nil && !(opts.ForcePurge && errors.Is(serr, backup.ErrVolumeSnapshotsUnusable)) {
			return nil, serr
		}
		if serr != nil {
			// The abandon path: the tarball's items run, the snapshots
			// the list recorded are abandoned.
			rep.SnapshotsProblem = serr.Error()
			d.log.Warn("force-purging a backup whose volume snapshot list is unusable; its snapshots are abandoned",
				"backup", r.Name, "recorded", recordedSnapshots(b), "error", serr)
		}
		rep.TotalItems = sum.Items + int64(len(snaps))
		done, err := d.runPlugins(ctx, b, sum, snaps, fence, rep, opts)
		if err != nil {
			return nil, err
		}
		rep.Warnings = d.pluginWarnings(b, receivedBy(rep.Counts, opts.skipped), "received")
		if n := unselectedSnapshots(d.cfg.Plugins.Plugins(), sum.Items, snaps); n > 0 {
			rep.Warnings = append(rep.Warnings, snapshotsWarning(n, "went to"))
		}
		if serr != nil {
			n := recordedSnapshots(b)
			done = false
			rep.NotSent += n
			rep.UnsettledCount += int(n)
			rep.TotalItems += n
		}
		switch {
		case done:
			nr, err := d.cfg.Store.RemoveFinalizer(catalog.WithDefaultActor(ctx, "lethe"), r.Key(), catalog.FinalizerDeleteActions)
			if err != nil {
				return nil, err
			}
			b.Resource, r = nr, nr
		case !opts.ForcePurge:
			rep.Result = ResultIncomplete
			return rep, nil
		default:
			// The operator's explicit way past unfinished plugin
			// actions (DESIGN §7.1): purged anyway, and audited.
			rep.Forced = true
			d.log.Warn("force-purging a backup with unsettled items", "backup", r.Name, "unsettled", rep.UnsettledCount)
		}
	} else if p, _, err := d.cfg.Store.LoadProgress(ctx, r.UID); err == nil {
		rep.TotalItems, rep.Counts = p.TotalItems, p.Counts
	}

	// The items are settled (or abandoned): the cascade may still hold
	// the record and the tarball (dependents, block referrers, finalizers).
	nr, why, err := d.Held(ctx, r, rep.Forced)
	if err != nil {
		return nil, err
	}
	b.Resource = nr
	if len(why) > 0 {
		return d.waiting(ctx, nr, rep, why), nil
	}
	return d.purge(ctx, b, rep, opts)
}

// receivedBy counts the items each plugin settled, failed or blocked,
// leaving out the skipped plugins.
func receivedBy(counts map[string]catalog.OutcomeCount, skipped map[string]backup.ExpectedPlugin) map[string]int64 {
	out := make(map[string]int64, len(counts))
	for name, c := range counts {
		if _, ok := skipped[name]; !ok {
			out[name] = c.Done + c.Skipped + c.Failed + c.Blocked
		}
	}
	return out
}

// abandonAll fills the report of a forced purge whose tarball is missing
// or replaced: every item recorded at registration that is not settled as
// done or skipped is abandoned, those that failed or are blocked and
// those never sent to any plugin alike.
func (d *Deleter) abandonAll(ctx context.Context, b *backup.Backup, rep *Report, cause error) error {
	rep.Forced = true
	rep.TarballProblem = "missing"
	if errors.Is(cause, ErrTarballReplaced) {
		rep.TarballProblem = "replaced"
	}
	total := b.Spec.Items + recordedSnapshots(b)
	var watermark int64
	p, rows, err := d.cfg.Store.LoadProgress(ctx, b.Resource.UID)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
	case err != nil:
		return err
	default:
		rep.Counts, watermark = p.Counts, p.Watermark
		total = max(total, p.TotalItems)
	}
	// Below the watermark every item is settled, or has a row (failed or
	// blocked); above it, none reached the end of its plugins.
	settled := watermark - int64(len(rows))
	rep.TotalItems = total
	rep.NotSent = max(total-watermark, 0)
	rep.UnsettledCount = int(max(total-settled, 0))
	rep.Unsettled = rows[:min(len(rows), maxReportedUnsettled)]
	return nil
}
