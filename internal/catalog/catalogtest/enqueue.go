package catalogtest

import (
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
