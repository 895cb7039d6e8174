package gc

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEachBoundsAndStops: each runs at most n calls at once, every element
// once, and returns the first error with the others' context cancelled.
func TestEachBoundsAndStops(t *testing.T) {
	xs := make([]int, 40)
	for i := range xs {
		xs[i] = i
	}
	var running, peak, calls atomic.Int64
	err := each(context.Background(), 3, xs, func(ctx context.Context, x int) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		calls.Add(1)
		time.Sleep(2 * time.Millisecond)
		running.Add(-1)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int64(len(xs)), calls.Load(), "every element once")
	require.Equal(t, int64(3), peak.Load(), "at most n at once, and n reached")

	boom := errors.New("boom")
	var cancelled atomic.Int64
	err = each(context.Background(), 4, xs, func(ctx context.Context, x int) error {
		if x == 5 {
			return boom
		}
		select {
		case <-ctx.Done():
			cancelled.Add(1)
		case <-time.After(time.Second):
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	require.Positive(t, cancelled.Load(), "the calls still running see the context cancelled")
}

// TestDefaultParallelFollowsTheCPUs: one step per CPU this process may
// use, at least 2 and at most ParallelDefault; New takes it when
// Config.Parallel is not set.
func TestDefaultParallelFollowsTheCPUs(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	for procs, want := range map[int]int{1: 2, 2: 2, 3: 3, 4: 4, 16: ParallelDefault} {
		runtime.GOMAXPROCS(procs)
		require.Equal(t, want, DefaultParallel(), "GOMAXPROCS=%d", procs)
	}
}
