package deletion

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/pkg/plugin"
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

// ParkedFor is how far ahead the work item of a deletion whose tarball is
// missing or replaced is put off: in effect, until an explicit delete.
const ParkedFor = 50 * 365 * 24 * time.Hour

// The range a plugin's retryAfter (plugin.Blocked) is held to. Zero means
// "use the backoff"; anything else outside the range is clamped, and
// logged once per plugin per run.
const (
	RetryAfterMin = time.Minute
	RetryAfterMax = 24 * time.Hour
)

// retryAt is when the daemon should try an unfinished deletion again: the
// earliest retry time a blocked item asked for, or a backoff that grows
// with the attempts, capped at an hour; never sooner than RetryAfterMin
// from now, so that no plugin can make the daemon spin.
func (d *Deleter) retryAt(rep *Report, w *catalog.WorkItem) time.Time {
	now := d.now()
	backoff := min(time.Duration(1<<min(w.Attempts, 6))*time.Minute, time.Hour)
	next := now.Add(backoff)
	if rep != nil {
		for _, o := range rep.Unsettled {
			if o.Outcome == "blocked" && !o.NextAttemptAt.IsZero() && o.NextAttemptAt.Before(next) {
				next = o.NextAttemptAt
			}
		}
	}
	return maxTime(next, now.Add(RetryAfterMin))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// clampRetryAfter holds a plugin's retryAfter to [RetryAfterMin,
// RetryAfterMax]; zero stays zero (the backoff decides). clamped says
// whether the value was out of range.
func clampRetryAfter(after time.Duration) (_ time.Duration, clamped bool) {
	switch {
	case after == 0:
		return 0, false
	case after < RetryAfterMin:
		return RetryAfterMin, true
	case after > RetryAfterMax:
		return RetryAfterMax, true
	}
	return after, false
}

// keepLease renews the lease every third of its TTL until ctx ends. A
// renewal that fails for a transient reason (the database briefly away)
// is retried sooner, for as long as the lease has not expired; a lease
// lost (expired, or claimed again) cancels the run, which then stops
// before its next write (every write is fenced anyway).
func (d *Deleter) keepLease(ctx context.Context, cancel context.CancelCauseFunc, w *catalog.WorkItem) <-chan struct{} {
	done := make(chan struct{})
	fence := w.Fence()
	expires := w.LeaseExpiresAt
	every, retry := d.cfg.LeaseTTL/3, max(d.cfg.LeaseTTL/20, 10*time.Millisecond)
	go func() {
		defer close(done)
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			tick := t.C
			if d.hooks.renewTick != nil {
				tick = d.hooks.renewTick
			}
			select {
			case <-ctx.Done():
				return
			case <-tick:
			}
			cur, err := d.cfg.Store.Renew(ctx, fence, d.cfg.LeaseTTL)
			switch {
			case err == nil:
				expires = cur.LeaseExpiresAt
				t.Reset(every)
			case ctx.Err() != nil:
				return
			case errors.Is(err, catalog.ErrLeaseLost):
				cancel(fmt.Errorf("lost the deletion lease: %w", err))
				return
			case !d.now().Before(expires):
				cancel(fmt.Errorf("lost the deletion lease: it expired at %s while renewing it failed: %w: %w",
					expires.Format(time.RFC3339), err, catalog.ErrLeaseLost))
				return
			default:
				d.log.Warn("renewing the deletion lease failed; retrying before it expires", "expires", expires, "error", err)
				t.Reset(retry)
			}
		}
	}()
	return done
}

// sparePool bounds the spent works kept for the feeder to reuse.
const sparePool = 4096

// work is one item travelling through the plugin stages. Once the settler
// has finished it, nothing else refers to it: it is reused for a later
// item (settler.spent).
type work struct {
	it *archive.Item
	// item is where it is decoded, usually (archive.Reader.NextInto).
	item archive.Item
	// plugins are the indexes (into the sorted plugin list) still to run,
	// in order; next is the position reached.
	plugins []int
	next    int
	// outcomes of settled plugins, for the counters.
	settled []settledOutcome
	// stop is set when a plugin failed or blocked the item: later plugins
	// are not run for it.
	stop *catalog.ItemOutcome
	// prior is the item's existing unsettled row, if any.
	prior *catalog.ItemOutcome
	// skippedAt is the plugin of prior when the deletion skips it
	// (Options.SkipPlugins): the item counts as skipped there.
	skippedAt string
	// settledBuf holds settled for the usual one or two plugins, sparing
	// an allocation per item.
	settledBuf [2]settledOutcome
}

type settledOutcome struct {
	plugin  int
	outcome plugin.Outcome
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

// checkFence renews the run's lease, proving that its claim is still the
// latest, right before a write outside the catalog (the tarball), which
// no transaction can fence.
func (d *Deleter) checkFence(ctx context.Context) error {
	f := catalog.FenceFrom(ctx)
	if f == nil {
		return nil
	}
	_, err := d.cfg.Store.Renew(ctx, f, d.cfg.LeaseTTL)
	return err
}

// runPlugins streams the tarball through the plugins. It reports whether
// every item is now settled as done or skipped.
func (d *Deleter) runPlugins(ctx context.Context, b *backup.Backup, sum *archive.Summary, snaps []velero.SnapshotItem, fence *catalog.Fence, rep *Report, opts Options) (bool, error) {
	r := b.Resource
	// The native volume snapshots follow the tarball's items.
	total := sum.Items + int64(len(snaps))
	infos := d.cfg.Plugins.Plugins()
	names := make([]string, len(infos))
	index := make(map[string]int, len(infos))
	for i, in := range infos {
		names[i] = in.Name
		index[in.Name] = i
	}

	progress, priorRows, err := d.cfg.Store.LoadProgress(ctx, r.UID)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		progress = &catalog.DeletionProgress{UID: r.UID, Digest: sum.Digest, Counts: map[string]catalog.OutcomeCount{}}
	case err != nil:
		return false, err
	case progress.Digest != sum.Digest:
		return false, fmt.Errorf("backup %s: the tarball changed since its deletion started (sha256 %s, was %s); refusing to continue",
			r.Name, short(sum.Digest), short(progress.Digest))
	}
	if progress.Counts == nil {
		progress.Counts = map[string]catalog.OutcomeCount{}
	}
	progress.TotalItems = total
	prior := make(map[int64]*catalog.ItemOutcome, len(priorRows))
	for i := range priorRows {
		prior[priorRows[i].Ordinal] = &priorRows[i]
	}

	ar, closeItems, err := d.openItems(ctx, b, sum)
	if err != nil {
		d.noteTarball(ctx, b, err, opts)
		return false, err
	}
	defer closeItems()

	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Open one session per plugin, lazily: a plugin that no item needs is
	// never started.
	pb := pluginBackup(b, d.tarballURL(ctx, b))
	sopts, err := d.sessionOptions(ctx, b, infos)
	if err != nil {
		return false, err
	}
	stages := make([]*stage, len(infos))
	var wg sync.WaitGroup
	first := make(chan *work, 1024)
	in := first
	for i := range infos {
		out := make(chan *work, 1024)
		stages[i] = &stage{d: d, idx: i, name: names[i], backup: pb, opts: sopts, in: in, out: out, fail: cancel}
		wg.Add(1)
		go func() { defer wg.Done(); stages[i].run(pctx) }()
		in = out
	}
	last := in

	// Feed the items. The feeder reads only the starting watermark and
	// the prior rows; the settler owns the live progress, and publishes
	// the watermark for the window: the feeder never runs more than
	// ReorderWindow ordinals ahead of it, so one slow item holds back at
	// most that many finished items in memory.
	startWatermark := progress.Watermark
	win := newWindow(startWatermark, int64(d.cfg.ReorderWindow))
	var readErr error
	feedDone := make(chan struct{})
	// The settler hands back the work of the items it is done with, and
	// their bodies to the reader (see archive.Reader.Recycle): the feeder
	// reads the next items into them.
	spare := make(chan *work, sparePool)
	go func() {
		defer close(feedDone)
		defer close(first)
		matcher := newMatcher(infos)
		var wk *work // reused until it is sent
		var snap int // the next native volume snapshot, after the tarball
		for {
			if wk == nil {
				select {
				case wk = <-spare:
				default:
					wk = new(work)
				}
			}
			var it *archive.Item
			if snap == 0 {
				var err error
				it, err = ar.NextInto(&wk.item)
				if err != nil && err != io.EOF {
					readErr = err
					cancel(err)
					return
				}
				if err == io.EOF {
					snap = 1
				}
			}
			if snap > 0 {
				if snap > len(snaps) {
					return
				}
				wk.item = *backup.SnapshotItem(sum.Items+int64(snap-1), &snaps[snap-1])
				it = &wk.item
				snap++
			}
			*wk = work{it: it, item: wk.item}
			wk.settled = wk.settledBuf[:0]
			p := prior[it.Ordinal]
			switch {
			case it.Ordinal < startWatermark && p == nil:
				ar.Recycle(it)
				continue // settled by an earlier run
			case it.Ordinal < startWatermark:
				wk.prior = p
				idx, ok := index[p.Plugin]
				if _, skipped := opts.skipped[p.Plugin]; !ok && skipped {
					// Its plugin is skipped (--skip-plugin): the item
					// goes on to the plugins after it.
					wk.skippedAt = p.Plugin
					for _, pi := range matcher.match(it) {
						if names[pi] > p.Plugin {
							wk.plugins = append(wk.plugins, pi)
						}
					}
					break
				}
				if !ok {
					// The plugin that must finish this item is gone;
					// keep the row and say so.
					stop := *p
					stop.Message = fmt.Sprintf("plugin %s is not installed: %s", p.Plugin, p.Message)
					wk.stop = &stop
					break
				}
				for _, pi := range matcher.match(it) {
					if pi >= idx {
						wk.plugins = append(wk.plugins, pi)
					}
				}
			default:
				wk.prior = p
				wk.plugins = matcher.match(it)
			}
			if !win.wait(pctx, it.Ordinal, d.hooks.feederWaits) {
				return
			}
			select {
			case first <- wk:
				wk = nil
			case <-pctx.Done():
				return
			}
		}
	}()

	// Settle results in ordinal order.
	s := &settler{
		d: d, r: r, fence: fence, progress: progress, names: names,
		unsettled: maps.Clone(prior), opts: opts, lastSave: time.Now(), window: win,
		reader: ar,
	}
	var sinkErr error
	for wk := range last {
		if sinkErr != nil {
			continue // drain
		}
		ord := wk.it.Ordinal
		err := s.add(ctx, wk)
		if err != nil {
			sinkErr = err
			cancel(err)
		}
		if d.hooks.settled != nil {
			d.hooks.settled(ord)
		}
		// What the settler is done with goes back to the feeder.
		for _, wk := range s.spent {
			select {
			case spare <- wk:
			default:
			}
		}
		clear(s.spent)
		s.spent = s.spent[:0]
	}
	wg.Wait()
	<-feedDone

	// The pass hashed the tarball as it streamed it: the only read of the
	// run. A stream that is not the registered tarball (replaced by an
	// object of the same size, or changed during the run) is refused here,
	// before anything is purged, and the watermark goes back to where the
	// run started, so that no item of the backup is skipped because an
	// item of the other tarball settled its ordinal.
	var digestErr error
	if readErr == nil && sinkErr == nil && pctx.Err() == nil {
		if found := ar.Digest(); found != sum.Digest {
			s.progress.Watermark = min(s.progress.Watermark, startWatermark)
			bl, _ := d.blobsFor(ctx, b)
			where := b.Spec.StorageKey
			if bl != nil {
				where = blobstore.ObjectURL(bl.URL(), where)
			}
			digestErr = fmt.Errorf("backup %s: %w: the tarball read from %s has sha256 %s, not the sha256 %s recorded at registration; "+
				"nothing is purged, and the items sent in this run will be sent again: run the delete again once the registered tarball is back",
				r.Name, ErrTarballReplaced, where, found, sum.Digest)
			d.noteTarball(ctx, b, digestErr, opts)
		}
	}

	// Persist what is settled, whatever happened.
	saveErr := s.save(context.WithoutCancel(ctx), true)
	rep.Counts = progress.Counts
	rep.UnsettledCount = len(s.unsettled)
	rep.Unsettled = append(rep.Unsettled, sortedOutcomes(s.unsettled, maxReportedUnsettled)...)
	if err := cmp.Or(sinkErr, readErr, context.Cause(pctx), digestErr, saveErr); err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return false, fmt.Errorf("%w after %d of %d items; progress is saved, run the delete again to resume", ErrInterrupted, s.processed, total)
		}
		if errors.Is(err, blobstore.ErrDownloadBroken) {
			return false, fmt.Errorf("backup %s: %w: reading its tarball from %s failed after %d of %d items, and resuming the download failed too (%v); "+
				"progress is saved: run `lethe backup delete %s` again to resume", r.Name, ErrInterrupted, d.tarballURL(ctx, b), s.processed, total, oneLine(err), r.Name)
		}
		return false, err
	}
	if progress.Watermark != total {
		return false, fmt.Errorf("backup %s: internal error: %d of %d items settled", r.Name, progress.Watermark, total)
	}
	d.updateStatus(context.WithoutCancel(ctx), r, progress, len(s.unsettled), "")
	return len(s.unsettled) == 0, nil
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

func pluginBackup(b *backup.Backup, tarball string) plugin.Backup {
	r := b.Resource
	pb := plugin.Backup{
		Name: r.Name, UID: r.UID, Labels: r.Labels, Annotations: r.Annotations,
		CreatedAt: r.CreatedAt, StorageLocation: tarball,
	}
	if b.Spec.ExpiresAt != nil {
		pb.ExpiresAt = *b.Spec.ExpiresAt
	}
	if b.Spec.Velero != nil {
		pb.SourceUID = b.Spec.Velero.UID
	}
	if b.Spec.CreatedAt != nil {
		pb.SourceCreatedAt = *b.Spec.CreatedAt
	}
	return pb
}

// stage runs one plugin: items that need it are sent to its session, the
// others pass through untouched.
type stage struct {
	d      *Deleter
	idx    int
	name   string
	backup plugin.Backup
	opts   pluginhost.SessionOptions
	in     <-chan *work
	out    chan<- *work
	fail   context.CancelCauseFunc

	mu       sync.Mutex
	inflight map[uint64]*work
	// clampLogged is set once a retryAfter out of range was logged.
	clampLogged bool
}

func (s *stage) wants(wk *work) bool {
	return wk.stop == nil && wk.next < len(wk.plugins) && wk.plugins[wk.next] == s.idx
}

func (s *stage) run(ctx context.Context) {
	defer close(s.out)
	var sess Session
	var recvDone chan struct{}
	defer func() {
		if sess == nil {
			return
		}
		// Finish the items in flight, unless the run is cancelled (a
		// signal, a lost lease): then abandon them. They are not settled,
		// so the next run sends them again.
		sess.CloseSend()
		select {
		case <-recvDone:
		case <-ctx.Done():
			sess.Close()
			<-recvDone
		}
		sess.Close()
	}()
	for wk := range s.in {
		if ctx.Err() != nil {
			continue // cancelled: drain without sending anything more
		}
		if !s.wants(wk) {
			select {
			case s.out <- wk:
			case <-ctx.Done():
			}
			continue
		}
		if sess == nil {
			var err error
			sess, err = s.d.cfg.Plugins.Open(ctx, s.name, s.backup, s.opts)
			if err != nil {
				s.fail(fmt.Errorf("plugin %s: %w", s.name, err))
				sess = nil
				continue
			}
			s.inflight = map[uint64]*work{}
			recvDone = make(chan struct{})
			go s.receive(ctx, sess, recvDone)
		}
		id := uint64(wk.it.Ordinal) //nolint:gosec // ordinals count from 0
		s.mu.Lock()
		s.inflight[id] = wk
		s.mu.Unlock()
		it := wk.it
		err := sess.Send(ctx, pluginhost.Item{ID: id, Item: plugin.Item{
			Group: it.Group, Version: it.Version, Resource: it.Resource, Kind: it.Kind,
			Namespace: it.Namespace, Name: it.Name, Object: it.Object,
		}})
		if err != nil {
			s.fail(fmt.Errorf("plugin %s: %w", s.name, err))
		}
	}
}

func (s *stage) receive(ctx context.Context, sess Session, done chan<- struct{}) {
	defer close(done)
	for res := range sess.Results() {
		s.mu.Lock()
		wk, ok := s.inflight[res.ID]
		delete(s.inflight, res.ID)
		s.mu.Unlock()
		if !ok {
			s.d.log.Warn("plugin returned a result for an unknown item; ignored", "plugin", s.name, "id", res.ID)
			continue
		}
		switch res.Outcome {
		case plugin.OutcomeDone, plugin.OutcomeSkipped:
			wk.settled = append(wk.settled, settledOutcome{plugin: s.idx, outcome: res.Outcome})
			wk.next++
		default:
			outcome := "failed"
			var next time.Time
			if res.Outcome == plugin.OutcomeBlocked {
				outcome = "blocked"
				after, clamped := clampRetryAfter(res.RetryAfter)
				if clamped && !s.clampLogged {
					s.clampLogged = true
					s.d.log.Warn("plugin asked for a retryAfter out of range; clamped (logged once per run)",
						"plugin", s.name, "retryAfter", res.RetryAfter, "clampedTo", after,
						"range", RetryAfterMin.String()+".."+RetryAfterMax.String())
				}
				if after > 0 {
					next = s.d.now().Add(after)
				}
			}
			wk.stop = &catalog.ItemOutcome{
				Ordinal: wk.it.Ordinal, ItemKey: wk.it.Key(), Plugin: s.name, Outcome: outcome,
				Message: res.Message, NextAttemptAt: next,
			}
		}
		select {
		case s.out <- wk:
		case <-ctx.Done():
		}
	}
}
