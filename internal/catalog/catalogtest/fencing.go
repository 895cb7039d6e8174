package catalogtest

import (
	"testing"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/stretchr/testify/require"
)

// testFenceByEpoch: two claims by the same holder (two runs inside one
// process) never both pass the fence. Only the latest claim may write a
// checkpoint, renew, release or complete.
func testFenceByEpoch(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const q = "deletions"
	_, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "bk"})
	require.NoError(t, err)
	first, err := f.s.ClaimKey(f.ctx, q, "bk", "host pid 7", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 1, first.Epoch)
	cp := func(fence *catalog.Fence, wm int64) error {
		return f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{Fence: fence, Progress: catalog.DeletionProgress{UID: "bk", Watermark: wm}})
	}
	require.NoError(t, cp(first.Fence(), 10))

	// The same holder claims again: a new epoch, and the first claim is
	// fenced off although its holder name and lease expiry still match.
	second, err := f.s.ClaimKey(f.ctx, q, "bk", "host pid 7", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 2, second.Epoch)
	require.ErrorIs(t, cp(first.Fence(), 20), catalog.ErrLeaseLost)
	require.NoError(t, cp(second.Fence(), 30))
	_, err = f.s.Renew(f.ctx, first.Fence(), time.Minute)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Release(f.ctx, first.Fence(), time.Time{}, "old run"), catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Complete(f.ctx, first.Fence()), catalog.ErrLeaseLost)
	w, err := f.s.GetWork(f.ctx, q, "bk")
	require.NoError(t, err)
	require.Equal(t, "host pid 7", w.Holder, "the old claim's release changed nothing")
	require.EqualValues(t, 2, w.Epoch)

	// A fenced write through the context: the same rule.
	ctx1 := catalog.WithFence(f.ctx, first.Fence())
	require.ErrorIs(t, f.s.SaveCheckpoint(ctx1, catalog.Checkpoint{Progress: catalog.DeletionProgress{UID: "bk", Watermark: 40}}), catalog.ErrLeaseLost)
	ctx2 := catalog.WithFence(f.ctx, second.Fence())
	require.NoError(t, f.s.SaveCheckpoint(ctx2, catalog.Checkpoint{Progress: catalog.DeletionProgress{UID: "bk", Watermark: 40}}))
	p, _, err := f.s.LoadProgress(f.ctx, "bk")
	require.NoError(t, err)
	require.EqualValues(t, 40, p.Watermark)

	// Claim (the daemon's way) also starts a new epoch once the lease is
	// free again.
	require.NoError(t, f.s.Release(f.ctx, second.Fence(), time.Time{}, ""))
	got, err := f.s.Claim(f.ctx, q, "host pid 7", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.EqualValues(t, 3, got[0].Epoch)
	require.ErrorIs(t, cp(second.Fence(), 50), catalog.ErrLeaseLost)
	require.NoError(t, cp(got[0].Fence(), 50))

	// An expired lease fences its own claim too.
	f.clock.Advance(2 * time.Minute)
	require.ErrorIs(t, cp(got[0].Fence(), 60), catalog.ErrLeaseLost)
	_, err = f.s.Renew(f.ctx, got[0].Fence(), time.Minute)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.ErrorIs(t, cp(&catalog.Fence{}, 60), catalog.ErrInvalid)
}

// testFencedResourceWrites: under a context fence, finalizer removal,
// updates and the purge fail with ErrLeaseLost, changing nothing, once
// the claim is not the latest.
func testFencedResourceWrites(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	r, err := f.s.Create(f.ctx, &catalog.Resource{Kind: "Backup", Name: "b"})
	require.NoError(t, err)
	_, err = f.s.Delete(f.ctx, r.Key(), catalog.DeleteOptions{Finalizers: []string{catalog.FinalizerDeleteActions, "x/y"}})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "deletions", Key: r.UID})
	require.NoError(t, err)
	old, err := f.s.ClaimKey(f.ctx, "deletions", r.UID, "me", time.Minute)
	require.NoError(t, err)
	oldCtx := catalog.WithFence(f.ctx, old.Fence())
	_, err = f.s.RemoveFinalizer(catalog.WithActor(oldCtx, "me"), r.Key(), "x/y")
	require.NoError(t, err, "the live claim passes")

	cur, err := f.s.ClaimKey(f.ctx, "deletions", r.UID, "me", time.Minute)
	require.NoError(t, err)
	_, err = f.s.RemoveFinalizer(catalog.WithActor(oldCtx, "me"), r.Key(), catalog.FinalizerDeleteActions)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	got, err := f.s.Get(f.ctx, r.Key())
	require.NoError(t, err)
	require.Equal(t, []string{catalog.FinalizerDeleteActions}, got.Finalizers, "the fenced-off removal changed nothing")
	got.Labels = map[string]string{"a": "b"}
	_, err = f.s.Update(oldCtx, got)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Purge(catalog.WithActor(oldCtx, "me"), r.Key(), catalog.PurgeOptions{Force: true}), catalog.ErrLeaseLost)
	_, err = f.s.Get(f.ctx, r.Key())
	require.NoError(t, err, "the fenced-off purge changed nothing")

	curCtx := catalog.WithFence(f.ctx, cur.Fence())
	_, err = f.s.RemoveFinalizer(catalog.WithActor(curCtx, "me"), r.Key(), catalog.FinalizerDeleteActions)
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(catalog.WithActor(curCtx, "me"), r.Key(), catalog.PurgeOptions{}))
	_, err = f.s.GetTombstone(f.ctx, r.Key())
	require.NoError(t, err)
}
