package gc

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/termtext"
)

// claimBatch is how many due items one poll claims.
const claimBatch = 64

// Run collects garbage until ctx ends: it queues every resource already
// Deleting (once, at start), then follows the change feed, stepping the
// resources each change may unblock, and claims queued items whose time
// has come (plugin retries, leases of dead holders, the Recheck safety
// net). It never scans the catalog periodically.
func (c *Collector) Run(ctx context.Context) error {
	_, err := c.drive(ctx, nil)
	if ctx.Err() != nil {
		// Stopping: whatever the last step returned (context.Canceled,
		// or database/sql's ErrTxDone for a transaction its context
		// rolled back) is the stop, not a failure.
		return nil
	}
	return err
}

// Outcome is how Drive ended.
type Outcome string

// The outcomes of Drive.
const (
	OutcomePurged Outcome = "purged" // the resource and its cascade are gone
	OutcomeStuck  Outcome = "stuck"  // the resource waits on something not being deleted
	// OutcomeRecreated: the resource of DriveOptions.UID is gone and its
	// cascade done, and the key now holds a new resource of the same
	// name (left alone).
	OutcomeRecreated Outcome = "recreated"
)

// DriveOptions tune Drive.
type DriveOptions struct {
	// Progress is called after each pass with the number of resources
	// purged so far.
	Progress func(purged int)
	// UID, when set, is the resource's UID: Drive then also carries on
	// after a resource purged by someone else (a Backup purged by the
	// deletion pipeline), whose dependents lose their owner, and
	// recognises a new resource of the same name (another UID) as the
	// end of this one's deletion (OutcomeRecreated), not as one to wait
	// for.
	UID string
}

// Drive runs the collector in process until k is purged and nothing it
// cascaded to is left to do now, or until k is stuck (it has the
// DeletionStuck condition and nothing is due). It is what `lethe delete
// --wait` runs; it can stop at any moment and a server carries on.
func (c *Collector) Drive(ctx context.Context, k catalog.Key, opts DriveOptions) (Outcome, error) {
	return c.drive(ctx, &driveTarget{key: k, opts: opts})
}

type driveTarget struct {
	key    catalog.Key
	opts   DriveOptions
	purged int
	// seen is the version of the last event counted.
	seen int64
}

func (c *Collector) drive(ctx context.Context, target *driveTarget) (Outcome, error) {
	from, err := c.st.CurrentVersion(ctx)
	if err != nil {
		return "", err
	}
	if target != nil {
		target.seen = from
	}
	sub, err := c.st.Watch(ctx, catalog.WatchOptions{FromVersion: from})
	if err != nil {
		return "", err
	}
	defer sub.Close()
	if target == nil {
		if err := c.queueDeleting(ctx); err != nil {
			return "", err
		}
	}
	if target != nil {
		// The target first: what changed before the feed was opened is
		// seen now.
		r, err := c.st.Get(ctx, target.key)
		switch {
		case err == nil && target.opts.UID != "" && r.UID != target.opts.UID:
			// Re-created: the one this drive is for is purged.
			if err := c.claimAndStep(ctx, target.opts.UID); err != nil {
				return "", err
			}
		case err == nil:
			if err := c.claimAndStep(ctx, r.UID); err != nil {
				return "", err
			}
		case !errors.Is(err, catalog.ErrNotFound):
			return "", err
		case target.opts.UID != "":
			if err := c.claimAndStep(ctx, target.opts.UID); err != nil {
				return "", err
			}
		}
	}
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case ev, ok := <-sub.Events():
			if !ok {
				if err := sub.Err(); err != nil {
					return "", err
				}
				return "", ctx.Err()
			}
			wake := map[string]bool{}
			c.wakeFor(ctx, ev, wake, target)
			// Drain what is already there, so one pass serves a burst.
		drain:
			for range 4096 {
				select {
				case ev, ok := <-sub.Events():
					if !ok {
						break drain
					}
					c.wakeFor(ctx, ev, wake, target)
				default:
					break drain
				}
			}
			uids := make([]string, 0, len(wake))
			for uid := range wake {
				uids = append(uids, uid)
			}
			if err := each(ctx, c.cfg.Parallel, uids, c.claimAndStep); err != nil {
				return "", err
			}
		case <-poll.C:
			n, err := c.pollDue(ctx)
			if err != nil {
				return "", err
			}
			if n == claimBatch {
				poll.Reset(0)
			} else {
				poll.Reset(c.cfg.PollInterval)
			}
		}
		if target != nil {
			if target.opts.Progress != nil {
				target.opts.Progress(target.purged)
			}
			if out, done, err := c.driveDone(ctx, target); err != nil || done {
				if err == nil && out != OutcomeStuck {
					err = c.countTo(ctx, sub, target)
				}
				return out, err
			}
		}
	}
}

// countTo counts the purges the feed has not delivered yet, up to the
// catalog's version now, and reports the total: the last passes purged
// in batches whose events Drive had not read when it found the work done.
func (c *Collector) countTo(ctx context.Context, sub catalog.Subscription, t *driveTarget) error {
	v, err := c.st.CurrentVersion(ctx)
	if err != nil {
		return err
	}
	for t.seen < v {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-sub.Events():
			if !ok {
				return sub.Err()
			}
			t.seen = ev.Version
			if ev.Type == catalog.EventDeleted {
				t.purged++
			}
		}
	}
	if t.opts.Progress != nil {
		t.opts.Progress(t.purged)
	}
	return nil
}

// driveDone says whether Drive is over.
func (c *Collector) driveDone(ctx context.Context, t *driveTarget) (Outcome, bool, error) {
	r, err := c.st.Get(ctx, t.key)
	gone := OutcomePurged
	if err == nil && t.opts.UID != "" && r.UID != t.opts.UID {
		// The key holds a new resource: the one driven is purged (a key
		// holds one UID at a time), and the new one is not ours to wait
		// for.
		err, gone = catalog.ErrNotFound, OutcomeRecreated
	}
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		items, err := c.st.ListWork(ctx, Queue)
		if err != nil {
			return "", false, err
		}
		now := c.now()
		busy := false
		for _, w := range items {
			if w.Holder != "" && w.Holder != c.cfg.Holder && c.cfg.DeadHolder != nil && c.cfg.DeadHolder(w.Holder) {
				if err := c.claimAndStep(ctx, w.Key); err != nil {
					return "", false, err
				}
				busy = true
				continue
			}
			if !w.RunAt.After(now) || w.Holder != "" {
				busy = true // something is due or running
			}
		}
		if busy {
			return "", false, nil
		}
		return gone, true, nil
	case err != nil:
		return "", false, err
	case r.Phase != catalog.PhaseDeleting:
		return "", false, nil
	}
	if stuckCondition(r) == nil {
		return "", false, nil
	}
	w, err := c.st.GetWork(ctx, Queue, r.UID)
	if err == nil && !w.RunAt.After(c.now()) {
		return "", false, nil
	}
	return OutcomeStuck, true, nil
}

// wakeFor adds to wake the resources a change may move on: the resource
// itself when it is Deleting or gone, its owners, and the targets of its
// block and cascade references.
func (c *Collector) wakeFor(ctx context.Context, ev catalog.Event, wake map[string]bool, target *driveTarget) {
	r := ev.Resource
	if r == nil {
		return
	}
	if target != nil {
		target.seen = max(target.seen, ev.Version)
		if ev.Type == catalog.EventDeleted {
			target.purged++
		}
	}
	// One purged by this process's batch had no dependent: only its
	// owners and block targets may move on.
	if !c.isDone(r.UID) {
		switch {
		case ev.Type == catalog.EventDeleted:
			wake[r.UID] = true // its dependents lose an owner
		case r.Phase == catalog.PhaseDeleting:
			wake[r.UID] = true
		}
	}
	for _, o := range r.Owners {
		wake[o.UID] = true
	}
	for _, ref := range r.References {
		if ref.OnTargetDelete != catalog.RefBlock && ref.OnTargetDelete != catalog.RefCascade {
			continue
		}
		if ref.UID != "" {
			wake[ref.UID] = true
			continue
		}
		if t, err := c.st.Get(ctx, catalog.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}); err == nil && t.Phase == catalog.PhaseDeleting {
			wake[t.UID] = true
		}
	}
}

// queueDeleting queues every resource already Deleting (a start-up pass,
// over an index of the phase, not a periodic scan).
func (c *Collector) queueDeleting(ctx context.Context) error {
	opts := catalog.ListOptions{Phase: catalog.PhaseDeleting, Limit: 500}
	for {
		page, err := c.st.List(ctx, opts)
		if err != nil {
			return err
		}
		for _, r := range page.Items {
			if _, err := c.st.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: r.UID, RunAt: c.now()}); err != nil {
				return err
			}
		}
		if page.Continue == "" {
			return nil
		}
		opts.Continue = page.Continue
	}
}

// pollDue claims and steps the items whose time has come.
func (c *Collector) pollDue(ctx context.Context) (int, error) {
	items, err := c.st.Claim(ctx, Queue, c.cfg.Holder, c.cfg.LeaseTTL, claimBatch)
	if err != nil {
		return 0, err
	}
	if err := each(ctx, c.cfg.Parallel, items, c.stepClaimed); err != nil {
		return 0, err
	}
	return len(items), nil
}

// each calls fn for every element of xs, at most n at once, and returns
// the first error; the calls still running then see ctx cancelled.
func each[T any](ctx context.Context, n int, xs []T, fn func(context.Context, T) error) error {
	if n <= 1 || len(xs) <= 1 {
		for _, x := range xs {
			if err := fn(ctx, x); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	sem := make(chan struct{}, n)
	for _, x := range xs {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, x); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	return first
}

// claimAndStep steps uid under a lease on its work item. A resource
// without one is Deleting but unqueued (or a purged owner): it is queued
// first when Deleting. A lease held elsewhere means another process is on
// it, and sees the same change.
func (c *Collector) claimAndStep(ctx context.Context, uid string) error {
	// A read first: most changes concern resources without an item.
	_, err := c.st.GetWork(ctx, Queue, uid)
	var w *catalog.WorkItem
	if err == nil {
		w, err = c.st.ClaimKey(ctx, Queue, uid, c.cfg.Holder, c.cfg.LeaseTTL)
	}
	if errors.Is(err, catalog.ErrNotFound) {
		r, gerr := c.st.GetByUID(ctx, uid)
		switch {
		case errors.Is(gerr, catalog.ErrNotFound):
			// A purged owner: its dependents lose it (no lease needed:
			// every write is conditional, and idempotent).
			return c.ownerGone(ctx, uid, nil, 0)
		case gerr != nil:
			return gerr
		case r.Phase != catalog.PhaseDeleting:
			return nil
		}
		if _, err := c.st.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: uid, RunAt: c.now()}); err != nil {
			return err
		}
		w, err = c.st.ClaimKey(ctx, Queue, uid, c.cfg.Holder, c.cfg.LeaseTTL)
	}
	var held *catalog.LeaseHeldError
	if errors.As(err, &held) && c.cfg.DeadHolder != nil && c.cfg.DeadHolder(held.Holder) {
		w, err = c.takeOver(ctx, uid, held.Holder)
	}
	if errors.Is(err, catalog.ErrLeaseHeld) || errors.Is(err, catalog.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.stepClaimed(ctx, w)
}

// takeOver claims the item of a dead holder at once.
func (c *Collector) takeOver(ctx context.Context, uid, holder string) (*catalog.WorkItem, error) {
	cur, err := c.st.GetWork(ctx, Queue, uid)
	if err != nil {
		return nil, err
	}
	if cur.Holder == holder {
		c.log.Info("taking over the lease of a dead process", "holder", holder, "uid", uid)
		if err := c.st.Release(ctx, cur.Fence(), c.now(), "holder "+holder+" died"); err != nil && !errors.Is(err, catalog.ErrLeaseLost) {
			return nil, err
		}
	}
	return c.st.ClaimKey(ctx, Queue, uid, c.cfg.Holder, c.cfg.LeaseTTL)
}

// stepClaimed steps a claimed item under its fence, then completes it or
// parks it until its next time. Losing the lease is not an error: the
// new holder carries on.
func (c *Collector) stepClaimed(ctx context.Context, w *catalog.WorkItem) error {
	f := w.Fence()
	fctx := catalog.WithFence(ctx, f)
	res, err := c.step(fctx, w.Key, 0)
	if errors.Is(err, catalog.ErrLeaseLost) {
		return nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		next := c.now().Add(c.cfg.Backoff.Next(w.Attempts))
		if errors.Is(err, catalog.ErrNotFound) {
			// A normal race: another process (a second delete --wait, a
			// server) purged what this step was about to write. The next
			// step, now, reads the catalog again.
			c.log.Debug("collecting a resource raced another collector; stepping it again", "uid", w.Key, "error", err)
			next = c.now()
		} else {
			c.log.Warn("collecting a resource failed; retrying later", "uid", w.Key, "error", err)
		}
		rerr := c.st.Release(ctx, f, next, err.Error())
		if rerr != nil && !errors.Is(rerr, catalog.ErrLeaseLost) {
			return rerr
		}
		return nil
	}
	if res.done {
		err = c.st.Complete(ctx, f)
	} else {
		next := c.now().Add(c.cfg.Recheck)
		if !res.next.IsZero() && res.next.Before(next) {
			next = res.next
		}
		msg := ""
		if res.stuck != nil {
			msg = res.stuck.message()
		}
		err = c.st.Release(ctx, f, next, msg)
	}
	if errors.Is(err, catalog.ErrLeaseLost) {
		return nil
	}
	return err
}

// Finalizer is the part of the catalog Finalize needs.
type Finalizer interface {
	Get(ctx context.Context, k catalog.Key) (*catalog.Resource, error)
	RemoveFinalizer(ctx context.Context, k catalog.Key, finalizer string) (*catalog.Resource, error)
}

// ErrReservedFinalizer is returned for Lethe's own finalizers: Lethe removes them.
var ErrReservedFinalizer = errors.New("finalizer is Lethe's own")

// ErrNotDeleting is returned for a resource that is not Deleting: finalizers
// are removed from a Deleting resource only.
var ErrNotDeleting = errors.New("not being deleted")

// Finalize removes a user finalizer from a Deleting resource: the call an
// external controller makes when its cleanup is done. Lethe's own
// finalizers (lethe.io/...) are refused, as is a finalizer the resource
// does not have. The collector, woken by the change, purges the resource
// once nothing else holds it.
func Finalize(ctx context.Context, store Finalizer, k catalog.Key, finalizer string) error {
	if finalizer == catalog.FinalizerCascade || finalizer == catalog.FinalizerDeleteActions {
		return &FinalizeError{Key: k, Finalizer: finalizer, Err: ErrReservedFinalizer}
	}
	r, err := store.Get(ctx, k)
	if err != nil {
		return err
	}
	if r.Phase != catalog.PhaseDeleting {
		return &FinalizeError{Key: k, Finalizer: finalizer, Err: ErrNotDeleting, Phase: r.Phase}
	}
	if !slices.Contains(r.Finalizers, finalizer) {
		return &FinalizeError{Key: k, Finalizer: finalizer, Err: catalog.ErrNotFound, Have: r.Finalizers}
	}
	_, err = store.RemoveFinalizer(ctx, k, finalizer)
	return err
}

// FinalizeError says why Finalize refused.
type FinalizeError struct {
	Key       catalog.Key
	Finalizer string
	Phase     catalog.Phase
	Have      []string
	Err       error
}

func (e *FinalizeError) Error() string {
	key, fin := termtext.Quote(e.Key.String()), termtext.Quote(e.Finalizer)
	switch {
	case errors.Is(e.Err, ErrReservedFinalizer):
		return key + ": " + fin + " is Lethe's own finalizer; Lethe removes it (see lethe explain)"
	case errors.Is(e.Err, ErrNotDeleting):
		return key + " is " + termtext.Quote(string(e.Phase)) + ", not Deleting: finalizers are removed only during deletion"
	}
	have := "none"
	if len(e.Have) > 0 {
		quoted := make([]string, len(e.Have))
		for i, h := range e.Have {
			quoted[i] = termtext.Quote(h)
		}
		have = joinKeys(quoted)
	}
	return key + " has no finalizer " + fin + " (it has: " + have + ")"
}

func (e *FinalizeError) Unwrap() error { return e.Err }

// RetryHandler is the retry queue's handler (retry.CollectorConfig) for
// the rows of catalog resources: KindResource (a plugin that blocked or
// failed on it) and KindWait (a block referrer or a user finalizer).
// The queue says when; the handler steps the resource under its lease
// here and now, which runs the due plugin again (or checks the wait) and
// records the attempt. One scheduler: the collector itself never
// schedules a plugin retry. A resource another process is stepping is
// deferred until that lease ends; rows of a resource that is gone, or no
// longer being deleted, are removed.
func (c *Collector) RetryHandler() retry.Handler {
	return func(ctx context.Context, rows []*catalog.RetryRow) error {
		ctx = c.actor(ctx)
		uid := rows[0].OwnerUID
		r, err := c.st.GetByUID(ctx, uid)
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			_, err := c.cfg.Retry.Store().DeleteRetries(ctx, rows[0].Key, nil)
			return err
		case err != nil:
			return err
		case r.Phase != catalog.PhaseDeleting:
			_, err := c.cfg.Retry.Store().DeleteRetries(ctx, r.Key().String(), nil)
			return err
		}
		if _, err := c.st.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: uid, RunAt: c.now()}); err != nil {
			return err
		}
		// A holder of its own: a claim by the collector's own name would
		// fence off a step this process's collector is running now,
		// instead of waiting for it.
		w, err := c.st.ClaimKey(ctx, Queue, uid, c.cfg.Holder+" (retry)", c.cfg.LeaseTTL)
		var held *catalog.LeaseHeldError
		if errors.As(err, &held) && c.cfg.DeadHolder != nil && c.cfg.DeadHolder(held.Holder) {
			w, err = c.takeOver(ctx, uid, held.Holder)
		}
		if errors.As(err, &held) {
			return &retry.DeferError{Until: held.ExpiresAt, Reason: "its collection is running in " + held.Holder}
		}
		if err != nil {
			return err
		}
		return c.stepClaimed(ctx, w)
	}
}

// WakeOnRetryChange returns what the retry queue calls when the rows of a
// catalog resource changed (retry.Config.OwnerSync, for KindResource and
// KindWait): a dead letter, an operator's `retry now` or `retry discard`.
// It makes the resource's work item due now, so that the collector (the
// one writer of a resource's DeletionStuck condition) reads the rows
// again; an item being stepped right now is left alone (that step reads
// them). It needs no plugin host: `lethe retry` calls it, and the next
// collector (`lethe server`, `lethe delete --wait`) does the rest.
func WakeOnRetryChange(st catalog.WorkQueue, holder string, now func() time.Time) func(ctx context.Context, uid string) error {
	return func(ctx context.Context, uid string) error {
		t := now().UTC()
		w, err := st.GetWork(ctx, Queue, uid)
		if errors.Is(err, catalog.ErrNotFound) {
			_, err = st.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: uid, RunAt: t})
			return err
		}
		if err != nil || !w.RunAt.After(t) || (w.Holder != "" && w.LeaseExpiresAt.After(t)) {
			return err
		}
		cw, err := st.ClaimKey(ctx, Queue, uid, holder, LeaseTTLDefault)
		if errors.Is(err, catalog.ErrLeaseHeld) || errors.Is(err, catalog.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		err = st.Release(ctx, cw.Fence(), t, "woken: its rows in the retry queue changed")
		if errors.Is(err, catalog.ErrLeaseLost) {
			return nil
		}
		return err
	}
}
