// Package leader elects one replica of `lethe server` to run the singleton
// loops (TTL expiry, grace-window timers). Leadership is a lease in the
// catalog (catalog.Leadership): the leader renews it every third of its
// TTL; a graceful stop resigns it, which wakes the other replicas so one
// takes over at once; a leader that dies stops renewing, and another
// replica takes over when the lease expires.
//
// It owns only the election. It knows nothing of what the leader runs.
//
// A leader that cannot renew (the catalog unreachable, the process
// paused) stops its loops when the lease it last renewed would expire, by
// its own clock, before any other replica can take the lease. Replicas'
// clocks must therefore agree to well within the TTL (NTP). A renewal
// that finds another holder, or another term, stops them at once.
//
// None of that is relied on for safety: the leader's work runs with a
// context fenced by its term (catalog.WithLeaderFence), and the catalog
// refuses, in the write's own transaction, every write of a term that is
// over. A leader paused past its lease (SIGSTOP, a long GC pause, a VM
// migration) that resumes before it notices writes nothing.
package leader

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/catalog"
)

// Defaults.
const (
	NameDefault = "lethe-server"
	TTLDefault  = 15 * time.Second
)

// Catalog is the part of the catalog an Elector uses.
type Catalog interface {
	catalog.Leadership
}

// Config configures an Elector.
type Config struct {
	Store  Catalog
	Name   string // the lease's name; NameDefault
	Holder string // this replica's name in the lease; required
	// TTL is how long a lease lasts unless renewed; renewed every TTL/3.
	TTL    time.Duration
	Logger hclog.Logger
	Now    func() time.Time
	// Wake, when set, delivers hints that the lease may be free (another
	// replica resigned). Without them a follower still notices within
	// TTL/3, or when the lease it saw expires.
	Wake <-chan struct{}
	// OnChange is called (from Run's goroutine) when this replica starts
	// or stops leading; tookOver says a term began by taking over an
	// expired lease.
	OnChange func(leading, tookOver bool, l *catalog.LeaderLease)
	// NewTimer, when set, makes the timers the elector waits on
	// (time.NewTimer by default): a test sees each wait it asks for.
	NewTimer func(d time.Duration) *time.Timer
}

// Elector competes for the lease and runs the leader's work while it
// holds it.
type Elector struct {
	cfg     Config
	log     hclog.Logger
	leading atomic.Bool
	mu      sync.Mutex
	last    *catalog.LeaderLease
}

// New returns an Elector.
func New(cfg *Config) (*Elector, error) {
	c := *cfg
	if c.Store == nil || c.Holder == "" {
		return nil, errors.New("leader: Config.Store and Config.Holder are required")
	}
	c.Name = cmp.Or(c.Name, NameDefault)
	c.TTL = cmp.Or(c.TTL, TTLDefault)
	if c.TTL < 300*time.Millisecond {
		return nil, errors.New("leader: Config.TTL must be at least 300ms")
	}
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewTimer == nil {
		c.NewTimer = time.NewTimer
	}
	return &Elector{cfg: c, log: c.Logger.Named("leader")}, nil
}

// Leading reports whether this replica leads now.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Lease returns the lease as this replica last saw it (nil before the
// first attempt).
func (e *Elector) Lease() *catalog.LeaderLease {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		return nil
	}
	l := *e.last
	return &l
}

// renewDeadline is how long after a renewal this replica keeps leading
// without another.
func (e *Elector) renewDeadline() time.Duration { return e.cfg.TTL - e.cfg.TTL/4 }

func (e *Elector) see(l *catalog.LeaderLease) {
	e.mu.Lock()
	e.last = l
	e.mu.Unlock()
}

// Run competes for the lease until ctx ends. While this replica leads, it
// runs lead with a context that ends when leadership is lost or ctx ends,
// and waits for lead to return before it gives the lease up: the leader's
// work never outlives its lease by this process's own doing. On a graceful
// stop (ctx ends) it resigns the lease.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context)) error {
	every := e.cfg.TTL / 3
	for {
		start := e.cfg.Now()
		l, err := e.cfg.Store.AcquireLeader(ctx, e.cfg.Name, e.cfg.Holder, e.cfg.TTL)
		if ctx.Err() != nil {
			return nil
		}
		var wait time.Duration
		switch {
		case err != nil:
			e.log.Warn("cannot reach the leader lease; retrying", "error", err)
			wait = every
		case l.HeldBy(e.cfg.Holder, start):
			e.see(l)
			if err := e.lead(ctx, l, start, lead); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			continue
		default:
			e.see(l)
			// Look again when the holder's lease would lapse, and at
			// least every third of the TTL (a safety net).
			wait = min(max(l.ExpiresAt.Sub(e.cfg.Now()), time.Millisecond), every)
		}
		t := e.cfg.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-e.cfg.Wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// lead runs the leader's work while the lease is renewed, then stops it.
func (e *Elector) lead(ctx context.Context, l *catalog.LeaderLease, start time.Time, work func(context.Context)) error {
	e.log.Info("leading", "lease", e.cfg.Name, "term", l.Term, "tookOver", l.TookOver)
	e.leading.Store(true)
	if e.cfg.OnChange != nil {
		e.cfg.OnChange(true, l.TookOver, l)
	}
	// The work's writes are fenced by this term (catalog.WithLeaderFence):
	// the catalog refuses them once another replica has taken the lease
	// over, even if this process, paused past its lease, has not noticed.
	lctx, stop := context.WithCancel(catalog.WithLeaderFence(ctx, &catalog.LeaderFence{Name: e.cfg.Name, Holder: e.cfg.Holder, Term: l.Term}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		work(lctx)
	}()
	// until is when this replica gives up a lease it could not renew: a
	// quarter of the TTL before the lease lapses, by the clock read
	// before the renewal was asked (never later than the catalog's own
	// expiry). The margin lets the work stop before another replica can
	// take the lease, even on a busy machine (Kubernetes' leader election
	// keeps its renew deadline under the lease duration likewise).
	until := start.Add(e.renewDeadline())
	every, retry := e.cfg.TTL/3, max(e.cfg.TTL/20, 10*time.Millisecond)
	next := max(every-e.cfg.Now().Sub(start), 0) // from when the acquisition began, as every renewal's
	reason := "stopping"
	for reason == "stopping" {
		left := until.Sub(e.cfg.Now())
		if left <= 0 {
			reason = "the lease expired before it could be renewed"
			break
		}
		t := e.cfg.NewTimer(min(next, left))
		select {
		case <-ctx.Done():
			t.Stop()
			reason = ""
			continue
		case <-done:
			t.Stop()
			if ctx.Err() != nil {
				// The work ended because ctx did (both were ready, and
				// select picked this one): a graceful stop, so resign.
				reason = ""
				continue
			}
			// The work ended by itself (it should not): keep leading
			// without it rather than leave the lease held idle.
			reason = "the leader's work ended"
			continue
		case <-t.C:
		}
		if !e.cfg.Now().Before(until) {
			reason = "the lease expired before it could be renewed"
			break
		}
		s := e.cfg.Now()
		cur, err := e.cfg.Store.AcquireLeader(ctx, e.cfg.Name, e.cfg.Holder, e.cfg.TTL)
		switch {
		case ctx.Err() != nil:
			reason = ""
		case err != nil:
			e.log.Warn("renewing the leader lease failed; retrying before it expires", "expires", until, "error", err)
			next = retry
		case cur.HeldBy(e.cfg.Holder, s) && cur.Term == l.Term:
			e.see(cur)
			// The next renewal is due a third of the TTL after this one
			// began, not after it ended: renewals that each take long (a
			// catalog 200 ms away, issue 28's fault suite) must not drift
			// past the deadline one by one.
			until, next = s.Add(e.renewDeadline()), max(every-e.cfg.Now().Sub(s), 0)
		default:
			e.see(cur)
			reason = "another replica holds the lease"
		}
	}
	stop()
	<-done
	e.leading.Store(false)
	if e.cfg.OnChange != nil {
		e.cfg.OnChange(false, false, l)
	}
	if reason != "" {
		e.log.Warn("no longer leading", "lease", e.cfg.Name, "term", l.Term, "reason", reason)
		return nil
	}
	// Graceful stop: the work has stopped; give the lease up so another
	// replica takes over now rather than when it expires.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := e.cfg.Store.ResignLeader(rctx, e.cfg.Name, e.cfg.Holder); err != nil {
		e.log.Warn("could not resign the leader lease; another replica takes over when it expires", "expires", until, "error", err)
		return nil
	}
	e.log.Info("resigned the leader lease", "lease", e.cfg.Name, "term", l.Term)
	return nil
}
