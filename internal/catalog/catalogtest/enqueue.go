package catalogtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testDeleteQueuesItsWorkItemInTheSameWrite: a Delete with Enqueue moves
// the resource to Deleting and queues its work item (the queue, the
// resource's UID, to run now) in one transaction: both are there after
// it, and a Delete that is refused queues nothing. Queueing again is a
// no-op that keeps the item.
func testDeleteQueuesItsWorkItemInTheSameWrite(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const queue = "test-deletions"
	a := f.create(t, res("App", "ns", "a", nil))
	b := f.create(t, res("App", "ns", "b", nil))

	d, err := f.s.Delete(f.ctx, a.Key(), catalog.DeleteOptions{Enqueue: queue})
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, d.Phase)
	items, err := f.s.ListWork(f.ctx, queue)
	require.NoError(t, err)
	require.Len(t, items, 1, "the request and its work item are one write")
	require.Equal(t, a.UID, items[0].Key)
	require.False(t, items[0].RunAt.After(f.clock.Now()), "the item runs now")

	// A refused request (already Deleting; not Scheduled) queues nothing.
	_, err = f.s.Delete(f.ctx, b.Key(), catalog.DeleteOptions{Enqueue: queue, OnlyIfScheduled: true})
	require.ErrorIs(t, err, catalog.ErrInvalidTransition)
	_, err = f.s.Delete(f.ctx, a.Key(), catalog.DeleteOptions{Enqueue: queue})
	require.ErrorIs(t, err, catalog.ErrInvalidTransition)
	items, err = f.s.ListWork(f.ctx, queue)
	require.NoError(t, err)
	require.Len(t, items, 1, "a refused request queues nothing")

	// Without Enqueue, nothing is queued.
	_, err = f.s.Delete(f.ctx, b.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	items, err = f.s.ListWork(f.ctx, queue)
	require.NoError(t, err)
	require.Len(t, items, 1)

	// Enqueue of the same key keeps the one item.
	w, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: queue, Key: a.UID, RunAt: f.clock.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, items[0].ID, w.ID)
}

// testEnqueueRacingCompleteNeverFails: an Enqueue of a key whose item
// another writer completes (deletes) at the same moment returns the item
// it queued, never an error. On PostgreSQL the insert that finds the key
// taken and the read that follows it see different snapshots: the item
// can be gone in between, and Enqueue must queue it again rather than
// fail (the garbage collector's loop failed on "no rows" under a
// 100,000-resource cascade on three replicas).
func testEnqueueRacingCompleteNeverFails(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const queue, rounds, keys = "race", 400, 4
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	errs := make(chan error, 8)
	var completers sync.WaitGroup
	for c := range 3 {
		completers.Go(func() {
			for ctx.Err() == nil {
				got, err := f.s.Claim(ctx, queue, fmt.Sprintf("completer-%d", c), time.Hour, keys)
				for _, w := range got {
					if err == nil {
						err = f.s.Complete(ctx, w.Fence())
					}
				}
				if err != nil && ctx.Err() == nil && !errors.Is(err, catalog.ErrLeaseLost) {
					errs <- err
					return
				}
			}
		})
	}
	var enqueuers sync.WaitGroup
	for k := range keys {
		enqueuers.Go(func() {
			key := fmt.Sprintf("k%d", k)
			for i := range rounds {
				w, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: queue, Key: key})
				if err != nil {
					errs <- fmt.Errorf("round %d of %s: %w", i, key, err)
					return
				}
				if w.Key != key {
					errs <- fmt.Errorf("round %d of %s: Enqueue returned %s", i, key, w.Key)
					return
				}
			}
		})
	}
	enqueuers.Wait()
	cancel()
	completers.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
