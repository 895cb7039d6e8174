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

// testDeleteMany: DeleteMany moves each resource Delete would move to
// Deleting, in order, with consecutive versions, one UPDATED event and
// one audit entry each, and its work item; one Delete would refuse (not
// found, already Deleting, in its grace window) is left unchanged with
// its own error, and takes no version: the feed has no gap.
func testDeleteMany(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	a := f.create(t, res("K", "ns", "a", nil))
	b := f.create(t, res("K", "ns", "b", nil))
	c := f.create(t, res("K", "ns", "c", nil))
	_, err := f.s.Delete(f.ctx, c.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	d := f.create(t, res("K", "ns", "d", nil))
	_, err = f.s.Schedule(f.ctx, d.Key(), catalog.ScheduleOptions{Delay: time.Hour})
	require.NoError(t, err)
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)

	// All refused: nothing written.
	out, errs, err := f.s.DeleteMany(f.ctx, []catalog.DeleteItem{{Key: c.Key()}, {Key: key("K", "ns", "missing")}})
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Len(t, errs, 2)
	assert.Nil(t, out[0])
	requireTransition(t, errs[0], catalog.PhaseDeleting, catalog.PhaseDeleting)
	require.ErrorIs(t, errs[1], catalog.ErrNotFound)
	_, _, err = f.s.DeleteMany(f.ctx, []catalog.DeleteItem{{Key: a.Key()}, {Key: b.Key(), Options: catalog.DeleteOptions{Propagation: "Sideways"}}})
	require.ErrorIs(t, err, catalog.ErrInvalid, "an invalid item refuses the whole batch")
	v, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	require.Equal(t, v0, v, "nothing written")

	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{FromVersion: v0})
	require.NoError(t, err)
	defer sub.Close()
	root := &catalog.ObjectRef{Kind: "K", Namespace: "ns", Name: "root", UID: "root-uid"}
	out, errs, err = f.s.DeleteMany(f.ctx, []catalog.DeleteItem{
		{Key: a.Key(), Options: catalog.DeleteOptions{Finalizers: []string{"f1", "f2"}, Reason: "why a", Action: "cascade-delete", Root: root}},
		{Key: c.Key()},
		{Key: key("K", "ns", "missing")},
		{Key: b.Key(), Options: catalog.DeleteOptions{Propagation: catalog.PropagationBackground, Enqueue: "q1"}},
		{Key: d.Key()},
	})
	require.NoError(t, err)
	require.Len(t, out, 5)
	require.Len(t, errs, 5)
	requireTransition(t, errs[1], catalog.PhaseDeleting, catalog.PhaseDeleting)
	require.ErrorIs(t, errs[2], catalog.ErrNotFound)
	requireTransition(t, errs[4], catalog.PhaseScheduled, catalog.PhaseDeleting)
	for _, i := range []int{1, 2, 4} {
		assert.Nil(t, out[i], "item %d refused", i)
	}
	require.NoError(t, errs[0])
	require.NoError(t, errs[3])
	assert.Equal(t, catalog.PhaseDeleting, out[0].Phase)
	assert.Equal(t, []string{"f1", "f2"}, out[0].Finalizers)
	assert.Equal(t, root, out[0].DeletionRoot)
	assert.Equal(t, catalog.PropagationForeground, out[0].PropagationPolicy)
	assert.Equal(t, catalog.PropagationBackground, out[3].PropagationPolicy)
	assert.Equal(t, v0+1, out[0].ResourceVersion)
	assert.Equal(t, v0+2, out[3].ResourceVersion, "consecutive: the refused items take no version")
	v, err = f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, v0+2, v)
	for _, want := range []*catalog.Resource{out[0], out[3]} {
		stored, err := f.s.Get(f.ctx, want.Key())
		require.NoError(t, err)
		assert.Equal(t, want.ResourceVersion, stored.ResourceVersion)
		assert.Equal(t, catalog.PhaseDeleting, stored.Phase)
		select {
		case e := <-sub.Events():
			assert.Equal(t, catalog.EventUpdated, e.Type)
			assert.Equal(t, want.ResourceVersion, e.Version)
			assert.Equal(t, want.Key(), e.Resource.Key())
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for %s", want.Key())
		}
	}
	for _, k := range []catalog.Key{c.Key(), d.Key()} {
		stored, err := f.s.Get(f.ctx, k)
		require.NoError(t, err)
		assert.LessOrEqual(t, stored.ResourceVersion, v0, "%s unchanged", k)
	}
	w, err := f.s.GetWork(f.ctx, "q1", b.UID)
	require.NoError(t, err, "the work item is queued with the move")
	assert.Equal(t, b.UID, w.Key)
	entries, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "K", Since: Epoch})
	require.NoError(t, err)
	var acts []string
	for _, e := range entries {
		if e.Action == "cascade-delete" || e.Action == "delete" {
			acts = append(acts, e.Name+" "+e.Action+" "+e.Reason)
		}
	}
	assert.Equal(t, []string{"c delete ", "a cascade-delete why a", "b delete "}, acts)
}
