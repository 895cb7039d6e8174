package retry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// TestTwoCollectorsRunEachRowOnce: two servers (each its own catalog
// connection pool and lease holder) collect the same queue at once; every
// row is handed to exactly one handler, once.
func TestTwoCollectorsRunEachRowOnce(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			q0 := f.queue(t, f.st, policy(10))
			const n = 40
			outs := make([]retry.Outcome, n)
			for i := range outs {
				w := f.owner(t, fmt.Sprintf("w%02d", i))
				outs[i] = retry.Outcome{Kind: retry.KindWait, Owner: w.Key(), UID: w.UID, ItemID: "finalizer:example.com/x", Result: "waiting"}
			}
			_, err := q0.Record(f.ctx, outs...)
			require.NoError(t, err)
			f.clock.Advance(time.Hour)

			var mu sync.Mutex
			runs := map[int64][]string{}
			var wg sync.WaitGroup
			for _, holder := range []string{"server-a", "server-b"} {
				st := f.open()
				q := f.queue(t, st, policy(10))
				col, err := retry.NewCollector(&retry.CollectorConfig{Queue: q, Holder: holder, Batch: 3,
					Handlers: map[string]retry.Handler{retry.KindWait: func(ctx context.Context, rows []*catalog.RetryRow) error {
						mu.Lock()
						for _, r := range rows {
							runs[r.ID] = append(runs[r.ID], holder)
						}
						mu.Unlock()
						for _, r := range rows {
							if err := q.Succeed(ctx, catalog.Key{Kind: "Widget", Name: r.Key[len("Widget/"):]}, r.OwnerUID, []catalog.RetryIdentity{r.RetryIdentity}); err != nil {
								return err
							}
						}
						return nil
					}}})
				require.NoError(t, err)
				wg.Go(func() {
					for {
						got, err := col.Tick(f.ctx)
						if !assert.NoError(t, err) || got == 0 {
							return
						}
					}
				})
			}
			wg.Wait()
			require.Len(t, runs, n)
			for id, hs := range runs {
				assert.Len(t, hs, 1, "row %d ran in %v", id, hs)
			}
			left, err := q0.List(f.ctx, catalog.RetryFilter{})
			require.NoError(t, err)
			assert.Empty(t, left)
		})
	}
}

// TestCollectorSettlesWhatHandlersLeave: a handler that defers puts the
// rows off without an attempt; one that fails counts an attempt with
// its error; one that records nothing releases the rows on their
// schedule; a kind without a handler is an error, never a silent skip.
func TestCollectorSettlesWhatHandlersLeave(t *testing.T) {
	f := newFixture(t, "sqlite")
	q := f.queue(t, f.st, policy(10))
	w := f.owner(t, "w")
	mk := func(kind string) *catalog.RetryRow {
		rows, err := q.Record(f.ctx, retry.Outcome{Kind: kind, Owner: w.Key(), UID: w.UID, ItemID: kind, Result: "waiting"})
		require.NoError(t, err)
		return rows[0]
	}
	deferred, failed, quiet, orphan := mk("Defer"), mk("Fail"), mk("Quiet"), mk("NoHandler")
	until := epoch.Add(7 * time.Hour)
	col, err := retry.NewCollector(&retry.CollectorConfig{Queue: q, Holder: "me", Handlers: map[string]retry.Handler{
		"Defer": func(context.Context, []*catalog.RetryRow) error {
			return &retry.DeferError{Until: until, Reason: "later"}
		},
		"Fail":  func(context.Context, []*catalog.RetryRow) error { return errors.New("storage unreachable") },
		"Quiet": func(context.Context, []*catalog.RetryRow) error { return nil },
	}})
	require.NoError(t, err)
	f.clock.Advance(time.Hour)
	n, err := col.Tick(f.ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)

	get := func(r *catalog.RetryRow) *catalog.RetryRow {
		cur, err := q.Get(f.ctx, r.ID)
		require.NoError(t, err)
		return cur
	}
	d := get(deferred)
	assert.Equal(t, catalog.RetryRetryable, d.State)
	assert.Equal(t, until, d.NextAttemptAt)
	assert.Equal(t, 1, d.Attempts, "deferring is not an attempt")
	fl := get(failed)
	assert.Equal(t, 2, fl.Attempts)
	assert.Equal(t, "storage unreachable", fl.LastError)
	assert.Equal(t, "error", fl.History[1].Outcome)
	qt := get(quiet)
	assert.Equal(t, catalog.RetryRetryable, qt.State)
	assert.Equal(t, 1, qt.Attempts)
	assert.True(t, qt.NextAttemptAt.After(f.clock.Now()))
	o := get(orphan)
	assert.Equal(t, 2, o.Attempts)
	assert.Contains(t, o.LastError, "no handler")
	n, err = col.Tick(f.ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing due again at once")
}
