// Package softdelete runs the grace-window timers: when a Scheduled
// resource's delay expires, it hands the resource to the handler of its
// kind (for backups, the deletion pipeline), which moves it to Deleting.
//
// The next due time comes from the catalog's index (NextDue), and the
// change feed wakes the loop when something is scheduled or undeleted:
// there is no periodic scan but a rare safety net. Undelete needs nothing
// from here: an undeleted resource simply is not due any more.
//
// It is a singleton: `lethe server` runs it only on the elected leader
// (internal/leader). Two copies would be safe (the handler moves a
// resource on only if it is still Scheduled) but would race for nothing.
package softdelete

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/catalog"
)

// Defaults.
const (
	SafetyScanDefault = 15 * time.Minute
	RetryDefault      = 30 * time.Second
	BatchDefault      = 100
)

// Handler moves a due resource on (usually to Deleting).
type Handler func(ctx context.Context, r *catalog.Resource) error

// Catalog is the part of the catalog Timers uses.
type Catalog interface {
	catalog.Lifecycle
	catalog.Feed
}

// Config configures a Timers.
type Config struct {
	Store Catalog
	// Handlers by kind. A kind without one is moved to Deleting with the
	// catalog's default finalizers.
	Handlers map[string]Handler
	Logger   hclog.Logger
	Now      func() time.Time
	// SafetyScan bounds how long the loop sleeps without looking.
	SafetyScan time.Duration
	// Retry is the wait before a failed handler is tried again.
	Retry time.Duration
}

// Timers fires due soft deletions.
type Timers struct {
	cfg    Config
	log    hclog.Logger
	failed map[string]time.Time // uid → not before
	// Fired counts handled resources.
	Fired int
	hooks testHooks
}

// testHooks are test signals (see export_test.go); nil in production.
type testHooks struct {
	// sleeping is told how long the loop is about to sleep.
	sleeping func(time.Duration)
	// wake, when set, replaces the loop's timer: the test decides when
	// the sleep is over (with the injected clock moved on).
	wake <-chan time.Time
}

// New returns Timers.
func New(cfg *Config) (*Timers, error) {
	c := *cfg
	if c.Store == nil {
		return nil, errors.New("softdelete: Config.Store is required")
	}
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	if c.Now == nil {
		c.Now = time.Now
	}
	c.SafetyScan = cmp.Or(c.SafetyScan, SafetyScanDefault)
	c.Retry = cmp.Or(c.Retry, RetryDefault)
	return &Timers{cfg: c, log: c.Logger.Named("softdelete"), failed: map[string]time.Time{}}, nil
}

// Run works until ctx ends.
func (t *Timers) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := t.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		t.log.Warn("restarting after error", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

func (t *Timers) session(ctx context.Context) error {
	version, err := t.cfg.Store.CurrentVersion(ctx)
	if err != nil {
		return err
	}
	sub, err := t.cfg.Store.Watch(ctx, catalog.WatchOptions{FromVersion: version})
	if err != nil {
		return err
	}
	defer sub.Close()
	for {
		next, err := t.FireDue(ctx)
		if err != nil {
			return err
		}
		wait := t.cfg.SafetyScan
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(t.cfg.Now()), 0))
		}
		timer := time.NewTimer(wait)
		timerC := timer.C
		if t.hooks.wake != nil {
			timerC = t.hooks.wake
		}
		if t.hooks.sleeping != nil {
			t.hooks.sleeping(wait)
		}
	events:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timerC:
				break events
			case ev, ok := <-sub.Events():
				if !ok {
					timer.Stop()
					return cmp.Or(sub.Err(), errors.New("change feed closed"))
				}
				// Only a newly scheduled resource can move the next due
				// time earlier.
				if ev.Resource != nil && ev.Resource.Phase == catalog.PhaseScheduled && ev.Resource.DeletionDueAt != nil &&
					(next.IsZero() || ev.Resource.DeletionDueAt.Before(next)) {
					timer.Stop()
					break events
				}
			}
		}
	}
}

// FireDue hands every due resource to its handler and returns the next
// due time (zero if none).
func (t *Timers) FireDue(ctx context.Context) (time.Time, error) {
	now := t.cfg.Now()
	// Resources waiting to retry a failed handler are still due: ask for
	// that many more, so that they never crowd out the others.
	for uid, nb := range t.failed {
		if !now.Before(nb.Add(t.cfg.SafetyScan)) {
			delete(t.failed, uid) // long gone, or moved on by someone else
		}
	}
	limit := BatchDefault + len(t.failed)
	due, err := t.cfg.Store.DueScheduled(ctx, now, limit)
	if err != nil {
		return time.Time{}, err
	}
	var retryAt time.Time
	handled := 0
	for _, r := range due {
		if nb, ok := t.failed[r.UID]; ok && now.Before(nb) {
			if retryAt.IsZero() || nb.Before(retryAt) {
				retryAt = nb
			}
			continue
		}
		handled++
		if err := t.handle(ctx, r); err != nil {
			if ctx.Err() != nil {
				return time.Time{}, ctx.Err()
			}
			t.log.Error("grace window over, but moving on failed; will retry", "resource", r.Key().String(), "error", err)
			t.failed[r.UID] = now.Add(t.cfg.Retry)
			if retryAt.IsZero() || t.failed[r.UID].Before(retryAt) {
				retryAt = t.failed[r.UID]
			}
			continue
		}
		delete(t.failed, r.UID)
		t.Fired++
	}
	if len(due) == limit && handled > 0 {
		return now, nil // more are due
	}
	next, ok, err := t.cfg.Store.NextDue(ctx)
	if err != nil {
		return time.Time{}, err
	}
	switch {
	case !ok:
		return retryAt, nil
	case !next.After(now):
		// The earliest due resources are waiting for a retry, which hides
		// the next due time behind them: look again within a second, so a
		// resource that comes due meanwhile is not held up by them.
		if retryAt.IsZero() {
			return now.Add(time.Second), nil
		}
		return minTime(retryAt, now.Add(time.Second)), nil
	}
	return next, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (t *Timers) handle(ctx context.Context, r *catalog.Resource) error {
	if h, ok := t.cfg.Handlers[r.Kind]; ok {
		return h(ctx, r)
	}
	_, err := t.cfg.Store.Delete(catalog.WithActor(ctx, "softdelete"), r.Key(), catalog.DeleteOptions{
		Propagation: r.PropagationPolicy, OnlyIfScheduled: true, Reason: "grace window over",
	})
	if errors.Is(err, catalog.ErrInvalidTransition) {
		return nil // undeleted (or moved on) since it was listed
	}
	return err
}
