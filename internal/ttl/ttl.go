// Package ttl requests the deletion of backups whose TTL has expired. It
// keeps an in-memory index of expiry times, built by one listing at start
// and kept current by the catalog's change feed, and sleeps until the next
// expiry: there is no periodic scan except a rare safety net. An expired
// backup gets an ordinary deletion request, so the grace window applies.
//
// It knows the catalog and the Backup kind; it does not run plugins. It is
// a singleton: `lethe server` runs it only on the elected leader
// (internal/leader), so that replicas do not all request the same
// deletions.
package ttl

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// SafetyScanDefault is how often the whole catalog is re-read in case an
// event was missed.
const SafetyScanDefault = 15 * time.Minute

// A request that failed (the storage or the catalog failing for a while)
// is tried again after RetryDefault, doubling with each failure in a row
// up to MaxRetryDefault: not left to the safety scan, a quarter of an
// hour later (issue 28's S3 fault test found that).
const (
	RetryDefault    = time.Second
	MaxRetryDefault = time.Minute
)

// Requester requests a backup's deletion (deletion.Deleter in production).
type Requester func(ctx context.Context, name string) error

// Catalog is the part of the catalog a Controller uses.
type Catalog interface {
	catalog.Resources
	catalog.Feed
}

// Config configures a Controller.
type Config struct {
	Store   Catalog
	Request Requester
	Logger  hclog.Logger
	Now     func() time.Time
	// SafetyScan is the period of the safety-net rescan.
	SafetyScan time.Duration
	// Retry and MaxRetry bound the backoff of a failed request
	// (RetryDefault, MaxRetryDefault).
	Retry, MaxRetry time.Duration
	// Timer makes a timer; tests inject one. Default time.NewTimer.
	Timer func(d time.Duration) (<-chan time.Time, func() bool)
}

// Controller is the TTL controller.
type Controller struct {
	cfg   Config
	log   hclog.Logger
	idx   expiryHeap
	where map[string]*entry
	// Requested counts deletion requests, for tests and metrics.
	requested int
}

// New returns a Controller.
func New(cfg *Config) (*Controller, error) {
	c := *cfg
	if c.Store == nil || c.Request == nil {
		return nil, errors.New("ttl: Config.Store and Config.Request are required")
	}
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	if c.Now == nil {
		c.Now = time.Now
	}
	c.SafetyScan = cmp.Or(c.SafetyScan, SafetyScanDefault)
	c.Retry = cmp.Or(c.Retry, RetryDefault)
	c.MaxRetry = cmp.Or(c.MaxRetry, MaxRetryDefault)
	if c.Timer == nil {
		c.Timer = func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
	return &Controller{cfg: c, log: c.Logger.Named("ttl"), where: map[string]*entry{}}, nil
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("restarting after error", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// session lists, subscribes, and then serves events and timers until an
// error or the safety scan.
func (c *Controller) session(ctx context.Context) error {
	for {
		version, err := c.cfg.Store.CurrentVersion(ctx)
		if err != nil {
			return err
		}
		if err := c.rebuild(ctx); err != nil {
			return err
		}
		sub, err := c.cfg.Store.Watch(ctx, catalog.WatchOptions{FromVersion: version, Kind: backup.Kind})
		if err != nil {
			return err
		}
		err = c.serve(ctx, sub)
		_ = sub.Close()
		if err != nil {
			return err
		}
	}
}

func (c *Controller) serve(ctx context.Context, sub catalog.Subscription) error {
	scan, stopScan := c.cfg.Timer(c.cfg.SafetyScan)
	defer stopScan()
	for {
		if err := c.fireDue(ctx); err != nil {
			return err
		}
		var wake <-chan time.Time
		stop := func() bool { return false }
		if len(c.idx) > 0 {
			wake, stop = c.cfg.Timer(max(c.idx[0].due.Sub(c.cfg.Now()), 0))
		}
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-scan:
			stop()
			return nil // rebuild
		case <-wake:
		case ev, ok := <-sub.Events():
			stop()
			if !ok {
				return cmp.Or(sub.Err(), errors.New("change feed closed"))
			}
			c.apply(ev)
		}
	}
}

func (c *Controller) rebuild(ctx context.Context) error {
	c.idx, c.where = nil, map[string]*entry{}
	opts := catalog.ListOptions{Kind: backup.Kind, Phase: catalog.PhaseActive}
	for {
		page, err := c.cfg.Store.List(ctx, opts)
		if err != nil {
			return err
		}
		for _, r := range page.Items {
			c.upsert(r)
		}
		if page.Continue == "" {
			return nil
		}
		opts.Continue = page.Continue
	}
}

func (c *Controller) apply(ev catalog.Event) {
	if ev.Type == catalog.EventDeleted {
		c.remove(ev.Resource.Name)
		return
	}
	c.upsert(ev.Resource)
}

// upsert indexes an Active backup with an expiry; anything else leaves
// the index. So does a backup Velero has not finished writing (its
// recorded phase is unfinished): its expiry waits, neither requested nor
// failed, until a sync records a finished phase; that update comes back
// through the change feed, and an expiry already past fires then.
func (c *Controller) upsert(r *catalog.Resource) {
	b, err := backup.FromResource(r)
	if err != nil || r.Phase != catalog.PhaseActive || b.Spec.ExpiresAt == nil {
		c.remove(r.Name)
		return
	}
	if phase, unfinished := b.Unfinished(); unfinished {
		if _, ok := c.where[r.Name]; !ok {
			c.log.Debug("backup not finished by Velero; its expiry waits", "backup", r.Name, "phase", phase)
		}
		c.remove(r.Name)
		return
	}
	if e, ok := c.where[r.Name]; ok {
		if !e.expires.Equal(*b.Spec.ExpiresAt) {
			e.expires, e.due, e.failures = *b.Spec.ExpiresAt, *b.Spec.ExpiresAt, 0
			heap.Fix(&c.idx, e.index)
		}
		return
	}
	e := &entry{name: r.Name, expires: *b.Spec.ExpiresAt, due: *b.Spec.ExpiresAt}
	heap.Push(&c.idx, e)
	c.where[r.Name] = e
}

func (c *Controller) remove(name string) {
	if e, ok := c.where[name]; ok {
		heap.Remove(&c.idx, e.index)
		delete(c.where, name)
	}
}

// fireDue requests the deletion of every expired backup.
func (c *Controller) fireDue(ctx context.Context) error {
	now := c.cfg.Now()
	for len(c.idx) > 0 && !c.idx[0].due.After(now) {
		e := c.idx[0]
		c.remove(e.name)
		c.log.Info("backup expired; requesting its deletion", "backup", e.name, "expired", e.expires)
		if err := c.cfg.Request(ctx, e.name); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// It is still Active: try again after a backoff (a change
			// to the backup, or its deletion, updates or drops the entry
			// meanwhile).
			e.failures++
			wait := min(c.cfg.Retry<<min(e.failures-1, 20), c.cfg.MaxRetry)
			e.due = now.Add(wait)
			heap.Push(&c.idx, e)
			c.where[e.name] = e
			c.log.Error("requesting deletion of expired backup; retrying", "backup", e.name, "error", err, "retry_in", wait)
			continue
		}
		c.requested++
	}
	return nil
}

type entry struct {
	name     string
	expires  time.Time
	due      time.Time // expires, or the next try after failures
	failures int       // failed requests in a row
	index    int
}

type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
