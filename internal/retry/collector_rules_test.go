package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// TestAFailedRunWritesNothingOnARowAnotherCollectorClaimed: a handler
// fails, but while it ran its claim lapsed and another collector claimed
// the row (a new epoch). The superseded run records no attempt and no
// error on the row: it belongs to the other claim now.
func TestAFailedRunWritesNothingOnARowAnotherCollectorClaimed(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			q := f.queue(t, f.st, policy(10))
			w := f.owner(t, "w")
			rows, err := q.Record(f.ctx, retry.Outcome{Kind: "Slow", Owner: w.Key(), UID: w.UID, ItemID: "item", Result: "waiting"})
			require.NoError(t, err)
			before := rows[0]
			var other []*catalog.RetryRow
			col, err := retry.NewCollector(&retry.CollectorConfig{Queue: q, Holder: "server-a", LeaseTTL: time.Minute,
				Handlers: map[string]retry.Handler{"Slow": func(ctx context.Context, _ []*catalog.RetryRow) error {
					// server-a's lease lapses; server-b claims the row.
					f.clock.Advance(2 * time.Minute)
					var err error
					other, err = f.st.ClaimRetries(ctx, "server-b", time.Minute, 10)
					require.NoError(t, err)
					return errors.New("storage unreachable")
				}}})
			require.NoError(t, err)
			f.clock.Advance(time.Hour)
			n, err := col.Tick(f.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Len(t, other, 1, "server-b claimed the row")

			cur, err := q.Get(f.ctx, before.ID)
			require.NoError(t, err)
			require.Equal(t, before.Attempts, cur.Attempts, "the superseded run counted an attempt")
			require.NotEqual(t, "storage unreachable", cur.LastError, "the superseded run wrote its error")
			require.Len(t, cur.History, len(before.History))
			require.Equal(t, other[0].Epoch, cur.Epoch, "the row is still server-b's claim")
		})
	}
}

// TestCollectorConfigNeedsAQueueAndAHolder: a collector without a lease
// holder name is refused (two unnamed collectors would share claims).
func TestCollectorConfigNeedsAQueueAndAHolder(t *testing.T) {
	f := newFixture(t, "sqlite")
	q := f.queue(t, f.st, policy(10))
	_, err := retry.NewCollector(&retry.CollectorConfig{Queue: q})
	require.ErrorContains(t, err, "Holder are required")
	_, err = retry.NewCollector(&retry.CollectorConfig{Holder: "a"})
	require.ErrorContains(t, err, "Queue and Holder are required")
	_, err = retry.NewCollector(&retry.CollectorConfig{Queue: q, Holder: "a"})
	require.NoError(t, err)
}
