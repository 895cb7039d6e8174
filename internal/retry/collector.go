package retry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/catalog"
)

// Handler runs the due rows of one owner and one kind, claimed by this
// process. It records what happened through the Queue (Record, Succeed,
// Finish); rows it leaves untouched go back to waiting on their
// schedule, without an attempt counted. Returning a *DeferError puts the
// rows off, without an attempt; any other error is recorded as a failed
// attempt of each row.
type Handler func(ctx context.Context, rows []*catalog.RetryRow) error

// DeferError puts claimed rows off until Until without counting an
// attempt, e.g. until the other rows of the same backup are due (they
// run together), or until another process's lease on the deletion ends.
type DeferError struct {
	Until  time.Time
	Reason string
}

func (e *DeferError) Error() string {
	return fmt.Sprintf("deferred until %s: %s", e.Until.Format(time.RFC3339), e.Reason)
}

// Collector defaults.
const (
	// LeaseTTLDefault is the lease on claimed rows. A handler that runs
	// longer is not run twice: the work it starts has its own lease (a
	// deletion's), which a second claimer meets and defers to.
	LeaseTTLDefault = 10 * time.Minute
	BatchDefault    = 64
)

// CollectorConfig configures a Collector.
type CollectorConfig struct {
	Queue    *Queue
	Handlers map[string]Handler
	Holder   string
	LeaseTTL time.Duration
	Batch    int
	Logger   hclog.Logger
	Resync   time.Duration
}

// Collector claims due rows with leases and hands them to the handler of
// their kind. Its timer wakes at the next due time from the index (or on
// Wake); it never scans the table.
type Collector struct {
	cfg   CollectorConfig
	q     *Queue
	log   hclog.Logger
	wakeC chan struct{}
}

// NewCollector returns a Collector.
func NewCollector(cfg *CollectorConfig) (*Collector, error) {
	c := *cfg
	if c.Queue == nil || c.Holder == "" {
		return nil, errors.New("retry: CollectorConfig.Queue and Holder are required")
	}
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.Batch = cmp.Or(c.Batch, BatchDefault)
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	c.Resync = cmp.Or(c.Resync, ResyncDefault)
	return &Collector{cfg: c, q: c.Queue, log: c.Logger.Named("retry"), wakeC: make(chan struct{}, 1)}, nil
}

// Wake makes Run look at the queue at once.
func (c *Collector) Wake() {
	select {
	case c.wakeC <- struct{}{}:
	default:
	}
}

type group struct {
	kind, owner string
}

// Tick claims the rows due now, runs them, and returns how many it ran.
func (c *Collector) Tick(ctx context.Context) (int, error) {
	rows, err := c.q.cfg.Store.ClaimRetries(ctx, c.cfg.Holder, c.cfg.LeaseTTL, c.cfg.Batch)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	var order []group
	groups := map[group][]*catalog.RetryRow{}
	for _, r := range rows {
		g := group{r.Kind, cmp.Or(r.OwnerUID, r.Key)}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
	}
	for _, g := range order {
		c.run(ctx, g.kind, groups[g])
	}
	if m := c.q.cfg.Metrics; m != nil {
		_ = m.Refresh(ctx, c.q.cfg.Store)
	}
	return len(rows), nil
}

func (c *Collector) run(ctx context.Context, kind string, rows []*catalog.RetryRow) {
	h := c.cfg.Handlers[kind]
	var err error
	start := time.Now()
	if h == nil {
		err = fmt.Errorf("no handler for retry rows of kind %s in this process", kind)
	} else {
		err = h(ctx, rows)
	}
	took := time.Since(start)
	bg := context.WithoutCancel(ctx)
	var def *DeferError
	switch {
	case ctx.Err() != nil:
		// Stopping: the leases expire and another run takes the rows.
		return
	case errors.As(err, &def):
		for _, r := range rows {
			c.settle(bg, r, func(cur *catalog.RetryRow) (catalog.RetryPlan, error) {
				return catalog.RetryPlan{State: catalog.RetryRetryable, NextAttemptAt: def.Until}, nil
			})
		}
	case err != nil:
		c.log.Warn("running retry rows", "kind", kind, "owner", rows[0].Key, "rows", len(rows), "error", err)
		outs := make([]Outcome, 0, len(rows))
		for _, r := range rows {
			cur, gerr := c.q.cfg.Store.GetRetry(bg, r.ID)
			if gerr != nil || cur.Epoch != r.Epoch {
				continue // recorded or finished meanwhile
			}
			outs = append(outs, Outcome{Kind: r.Kind, Owner: ownerKey(r.Key), UID: r.OwnerUID, ItemID: r.ItemID, Plugin: r.Plugin,
				Result: "error", Message: err.Error(), Duration: took})
		}
		if _, rerr := c.q.Record(bg, outs...); rerr != nil {
			c.log.Error("recording a failed retry", "error", rerr)
		}
	default:
		now := c.q.now()
		for _, r := range rows {
			c.settle(bg, r, func(cur *catalog.RetryRow) (catalog.RetryPlan, error) {
				b := c.q.cfg.Policy.For(cur.Plugin)
				return catalog.RetryPlan{State: catalog.RetryRetryable, NextAttemptAt: b.Next(now, max(cur.Attempts, 1), 0, c.q.cfg.Rand)}, nil
			})
		}
	}
}

// settle ends this process's claim of r, unless the handler already
// recorded or finished it (then the epoch moved, or the row is gone).
func (c *Collector) settle(ctx context.Context, r *catalog.RetryRow, fn func(*catalog.RetryRow) (catalog.RetryPlan, error)) {
	_, err := c.q.cfg.Store.UpdateRetry(ctx, r.ID, r.Epoch, fn)
	if err != nil && !errors.Is(err, catalog.ErrLeaseLost) && !errors.Is(err, catalog.ErrNotFound) {
		c.log.Warn("releasing a retry row", "retry", r.ID, "error", err)
	}
}

// Run collects until ctx ends. It sleeps until the next due time from
// the index, a Wake, or Resync (rows written by another process wake
// nobody here), whichever is first.
func (c *Collector) Run(ctx context.Context) error {
	if m := c.q.cfg.Metrics; m != nil {
		_ = m.Refresh(ctx, c.q.cfg.Store)
	}
	for ctx.Err() == nil {
		n, err := c.Tick(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Error("claiming retry rows", "error", err)
		}
		if n > 0 && err == nil {
			continue
		}
		wait := c.cfg.Resync
		if due, ok, err := c.q.cfg.Store.NextRetryDue(ctx); err == nil && ok {
			wait = min(wait, max(due.Sub(c.q.cfg.Now()), minSleep))
		}
		if !sleep(ctx, wait, c.wakeC) {
			return nil
		}
	}
	return nil
}
