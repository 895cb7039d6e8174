package catalogtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testRemoveFinalizers: RemoveFinalizers removes the finalizer from each
// resource that has it, across the chunks a driver reads them in, each
// with its own version (consecutive, in the keys' order), UPDATED event
// and remove-finalizer audit entry; a resource without it is unchanged,
// a key given twice is written once; a resource that is not Deleting or
// does not exist refuses the whole batch, and nothing of it is written.
func testRemoveFinalizers(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const n = 300 // more than one of sqlstore's chunks of 256
	var keys []catalog.Key
	for i := range n {
		r := f.create(t, res("K", "ns", fmt.Sprintf("r-%03d", i), nil))
		fins := []string{"a", "b"}
		if i%50 == 7 {
			fins = []string{"b"} // nothing to remove
		}
		_, err := f.s.Delete(f.ctx, r.Key(), catalog.DeleteOptions{Finalizers: fins})
		require.NoError(t, err)
		keys = append(keys, r.Key())
	}
	active := f.create(t, res("K", "ns", "active", nil))
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)

	// Refused whole: a resource that is not Deleting, one that is gone.
	bad := append(append(append([]catalog.Key{}, keys[:10]...), active.Key()), keys[10:]...)
	_, err = f.s.RemoveFinalizers(f.ctx, bad, "a")
	requireTransition(t, err, catalog.PhaseActive, catalog.PhaseActive)
	assert.Contains(t, err.Error(), "active")
	_, err = f.s.RemoveFinalizers(f.ctx, append(keys[:20:20], key("K", "ns", "missing")), "a")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	assert.Contains(t, err.Error(), "missing")
	v, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	require.Equal(t, v0, v, "nothing of a refused batch is written")
	first, err := f.s.Get(f.ctx, keys[0])
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, first.Finalizers, "nothing of a refused batch is written")

	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{FromVersion: v0})
	require.NoError(t, err)
	defer sub.Close()
	ask := append(append([]catalog.Key{}, keys...), keys[3]) // keys[3] twice
	out, err := f.s.RemoveFinalizers(f.ctx, ask, "a")
	require.NoError(t, err)
	require.Len(t, out, len(ask))
	want := v0
	var changed []catalog.Key
	for i, k := range ask {
		require.NotNil(t, out[i], k.String())
		assert.Equal(t, k, out[i].Key())
		assert.Equal(t, []string{"b"}, out[i].Finalizers, k.String())
		assert.Equal(t, catalog.PhaseDeleting, out[i].Phase)
		stored, err := f.s.Get(f.ctx, k)
		require.NoError(t, err)
		assert.Equal(t, stored.ResourceVersion, out[i].ResourceVersion, "%s: what it returns is what is stored", k)
		assert.Equal(t, []string{"b"}, stored.Finalizers)
		if i == n {
			assert.Equal(t, out[3].ResourceVersion, out[i].ResourceVersion, "%s: given twice, written once", k)
			continue
		}
		if i%50 == 7 {
			assert.LessOrEqual(t, out[i].ResourceVersion, v0, "%s: unchanged (no finalizer a)", k)
			continue
		}
		want++
		assert.Equal(t, want, out[i].ResourceVersion, "%s: consecutive versions in the keys' order", k)
		changed = append(changed, k)
	}
	v, err = f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, want, v, "one version per resource changed, no gap")
	for _, k := range changed {
		select {
		case e := <-sub.Events():
			assert.Equal(t, catalog.EventUpdated, e.Type)
			require.NotNil(t, e.Resource)
			assert.Equal(t, k, e.Resource.Key())
			assert.Equal(t, []string{"b"}, e.Resource.Finalizers)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for %s", k)
		}
	}
	entries, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "K"})
	require.NoError(t, err)
	removed := map[string]int{}
	for _, e := range entries {
		if e.Action == "remove-finalizer" {
			assert.Equal(t, "a", e.Reason)
			assert.Equal(t, "tester", e.Actor)
			assert.Equal(t, catalog.PhaseDeleting, e.ToPhase)
			removed[e.Name]++
		}
	}
	assert.Len(t, removed, len(changed), "one entry per resource changed")
	for _, k := range changed {
		assert.Equal(t, 1, removed[k.Name], k.String())
	}

	// Again: nothing to remove, nothing written.
	again, err := f.s.RemoveFinalizers(f.ctx, keys, "a")
	require.NoError(t, err)
	require.Len(t, again, n)
	assert.Equal(t, out[0].ResourceVersion, again[0].ResourceVersion)
	v2, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, v, v2)
	none, err := f.s.RemoveFinalizers(f.ctx, nil, "a")
	require.NoError(t, err)
	assert.Empty(t, none)
}

// testLoadProgressMany: LoadProgressMany answers what LoadProgress does
// for each uid, across the chunks a driver reads them in: the progress
// and its outcomes (ordered by ordinal, then plugin), nil for a uid with
// none, and a uid asked twice twice.
func testLoadProgressMany(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const n = 600 // more than two of sqlstore's chunks of 256
	var uids []string
	for i := range n {
		uid := fmt.Sprintf("u-%03d", i)
		uids = append(uids, uid)
		if i%3 == 0 {
			continue // no progress
		}
		cp := catalog.Checkpoint{Progress: catalog.DeletionProgress{UID: uid, Digest: "gc", TotalItems: int64(i),
			Counts: map[string]catalog.OutcomeCount{"p": {Done: int64(i)}}}}
		if i%5 == 0 {
			cp.Upsert = []catalog.ItemOutcome{
				{Ordinal: int64(i % 7), Plugin: "q", Outcome: "failed", Message: uid},
				{Ordinal: 0, Plugin: "z", Outcome: "blocked"},
				{Ordinal: 0, Plugin: "a", Outcome: "failed"},
			}
		}
		require.NoError(t, f.s.SaveCheckpoint(f.ctx, cp))
	}
	ask := append(append([]string{}, uids...), "missing", uids[5], uids[1])
	progress, outcomes, err := f.s.LoadProgressMany(f.ctx, ask)
	require.NoError(t, err)
	require.Len(t, progress, len(ask))
	require.Len(t, outcomes, len(ask))
	have := 0
	for i, uid := range ask {
		p, outs, err := f.s.LoadProgress(f.ctx, uid)
		if err != nil {
			require.ErrorIs(t, err, catalog.ErrNotFound)
			assert.Nil(t, progress[i], "%s has no progress", uid)
			assert.Empty(t, outcomes[i], uid)
			continue
		}
		have++
		require.NotNil(t, progress[i], uid)
		assert.Equal(t, *p, *progress[i], uid)
		assert.Equal(t, outs, outcomes[i], uid)
	}
	assert.Equal(t, n-n/3+2, have)
	require.Len(t, outcomes[5], 3)
	assert.Equal(t, []string{"a", "z", "q"}, []string{outcomes[5][0].Plugin, outcomes[5][1].Plugin, outcomes[5][2].Plugin}, "ordered by ordinal, then plugin")
	assert.NotSame(t, progress[5], progress[n+1], "a uid asked twice gets two copies")
	progress[5].Counts["p"] = catalog.OutcomeCount{}
	assert.Equal(t, int64(5), progress[n+1].Counts["p"].Done)
	p, o, err := f.s.LoadProgressMany(f.ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, p)
	assert.Empty(t, o)
}
