package retry_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// TestOperatorCannotRequeueOrDiscardARowWhileItRuns: a row that a
// collector holds (Running, its lease not yet ended) is neither requeued
// nor discarded by an operator, dry run or not: either would race the run
// that holds it. Once the lease has ended (its holder died), both work.
func TestOperatorCannotRequeueOrDiscardARowWhileItRuns(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			p := policy(5)
			p.Default.Jitter = 0
			q := f.queue(t, f.st, p)
			w := f.owner(t, "w")
			rows, err := q.Record(f.ctx, failing(w, "in use"))
			require.NoError(t, err)
			id := rows[0].ID
			f.clock.Advance(p.Default.Delay(1))
			claimed, err := f.st.ClaimRetries(f.ctx, "server-a", time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			require.Equal(t, catalog.RetryRunning, claimed[0].State)

			for _, dryRun := range []bool{true, false} {
				_, err = q.RetryNow(f.ctx, id, dryRun)
				require.ErrorIs(t, err, retry.ErrRunning, "retry now, dry run %v", dryRun)
				_, err = q.Discard(f.ctx, id, dryRun)
				require.ErrorIs(t, err, retry.ErrRunning, "discard, dry run %v", dryRun)
			}
			cur, err := q.Get(f.ctx, id)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryRunning, cur.State)
			assert.Equal(t, "server-a", cur.Holder)

			// The holder died: once its lease is over, the operator may.
			f.clock.Advance(time.Minute + time.Second)
			back, err := q.RetryNow(f.ctx, id, false)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryRetryable, back.State)
			assert.Equal(t, 1, back.Attempts, "a requeue of a row that was not discarded keeps its attempts")
			f.clock.Advance(time.Second)
			claimed, err = f.st.ClaimRetries(f.ctx, "server-b", time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			f.clock.Advance(time.Minute + time.Second)
			gone, err := q.Discard(f.ctx, id, false)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryDiscarded, gone.State)
		})
	}
}
