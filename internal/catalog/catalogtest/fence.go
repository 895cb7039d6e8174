package catalogtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testAFenceWithoutItsIDOrHolderIsInvalid: a fence that lacks the work
// item's id, or its holder, is bad input (ErrInvalid) for Renew, Release,
// Complete and a fenced write, never matched against the rows: a fence
// with no holder must not pass for a released item, whose holder is empty.
func testAFenceWithoutItsIDOrHolderIsInvalid(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	w, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q", Key: "k"})
	require.NoError(t, err)
	claimed, err := f.s.Claim(f.ctx, "q", "me", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, f.s.Release(f.ctx, claimed[0].Fence(), time.Time{}, ""))
	r := f.create(t, res("Backup", "ns", "fenced", nil))

	for name, fence := range map[string]*catalog.Fence{
		"no holder": {Queue: "q", Key: "k", ID: w.ID, Epoch: claimed[0].Epoch},
		"no id":     {Queue: "q", Key: "k", Holder: "me", Epoch: claimed[0].Epoch},
	} {
		_, err := f.s.Renew(f.ctx, fence, time.Minute)
		require.ErrorIs(t, err, catalog.ErrInvalid, "Renew, %s", name)
		require.ErrorIs(t, f.s.Release(f.ctx, fence, time.Time{}, ""), catalog.ErrInvalid, "Release, %s", name)
		require.ErrorIs(t, f.s.Complete(f.ctx, fence), catalog.ErrInvalid, "Complete, %s", name)
		_, err = f.s.Delete(catalog.WithFence(f.ctx, fence), r.Key(), catalog.DeleteOptions{})
		require.ErrorIs(t, err, catalog.ErrInvalid, "a fenced write, %s", name)
	}
	got, err := f.s.Get(f.ctx, r.Key())
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, got.Phase, "bad input changes nothing")
}
