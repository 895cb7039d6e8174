package catalogtest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testCollectBatch: CollectBatch purges, in one transaction, exactly the
// resources that can go at once, each with one DELETED event, one audit
// entry and a tombstone; it leaves the others unchanged.
func testCollectBatch(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	owner := f.create(t, res("App", "ns", "owner", nil))
	leaf := f.create(t, res("Pod", "ns", "leaf", map[string]string{"app": "db"}))
	sched := f.create(t, res("Pod", "ns", "sched", nil))
	_, err := f.s.Schedule(f.ctx, sched.Key(), catalog.ScheduleOptions{Delay: 1})
	require.NoError(t, err)
	sched, err = f.s.Get(f.ctx, sched.Key())
	require.NoError(t, err)
	dep := &catalog.Resource{Kind: "Pod", Namespace: "ns", Name: "dep", Owners: []catalog.OwnerRef{{UID: owner.UID, Kind: "App", Name: "owner"}}}
	dep = f.create(t, dep)
	target := f.create(t, res("Volume", "ns", "target", nil))
	f.create(t, &catalog.Resource{Kind: "Restore", Namespace: "ns", Name: "r",
		References: []catalog.Reference{{Kind: "Volume", Namespace: "ns", Name: "target", OnTargetDelete: catalog.RefBlock}}})
	unsetTarget := f.create(t, res("Volume", "ns", "unset-target", nil))
	f.create(t, &catalog.Resource{Kind: "Report", Namespace: "ns", Name: "u",
		References: []catalog.Reference{{Kind: "Volume", Namespace: "ns", Name: "unset-target", OnTargetDelete: catalog.RefUnset}}})
	dangling := f.create(t, res("Volume", "ns", "dangling", nil))
	f.create(t, &catalog.Resource{Kind: "Report", Namespace: "ns", Name: "d",
		References: []catalog.Reference{{Kind: "Volume", Namespace: "ns", Name: "dangling", OnTargetDelete: catalog.RefAllowDangling}}})
	fin := f.create(t, &catalog.Resource{Kind: "Pod", Namespace: "ns", Name: "fin", Finalizers: []string{"example.com/x"}})
	stale := f.create(t, res("Pod", "ns", "stale", nil))
	deleting := f.create(t, res("Pod", "ns", "deleting", nil))
	deleting, err = f.s.Delete(f.ctx, deleting.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)

	from, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	item := func(r *catalog.Resource) catalog.CollectItem {
		return catalog.CollectItem{UID: r.UID, ResourceVersion: r.ResourceVersion, Reason: "collected"}
	}
	staleItem := item(stale)
	staleItem.ResourceVersion--
	got, err := f.s.CollectBatch(f.ctx, []catalog.CollectItem{
		item(leaf), item(sched), item(dep), item(owner), item(target), item(fin), staleItem, item(deleting), item(unsetTarget), item(dangling),
		{UID: "no-such-uid", ResourceVersion: 1},
	})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{leaf.UID, sched.UID, dep.UID, dangling.UID}, got,
		"the owner (a dependent), the block and unset targets, the finalized, the stale, the Deleting one and the unknown stay")
	for _, r := range []*catalog.Resource{leaf, sched, dep, dangling} {
		_, err := f.s.Get(f.ctx, r.Key())
		require.ErrorIs(t, err, catalog.ErrNotFound)
		ts, err := f.s.GetTombstone(f.ctx, r.Key())
		require.NoError(t, err)
		require.Equal(t, r.UID, ts.UID)
		require.Equal(t, r.Key(), ts.Key)
		require.Equal(t, "tester", ts.Actor)
		require.Equal(t, "collected", ts.Reason)
		require.False(t, ts.PurgedAt.IsZero())
		// One entry: from its phase straight to Purged.
		es, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r.UID})
		require.NoError(t, err)
		e := es[len(es)-1]
		require.Equal(t, "purge", e.Action)
		require.Equal(t, r.Phase, e.FromPhase, "%s", r.Key())
		require.Equal(t, catalog.PhasePurged, e.ToPhase)
		require.Equal(t, "collected", e.Reason)
		require.Equal(t, "tester", e.Actor)
		for _, x := range es[:len(es)-1] {
			require.NotEqual(t, "delete", x.Action, "%s never was Deleting", r.Key())
		}
	}
	for _, r := range []*catalog.Resource{owner, target, fin, stale, deleting, unsetTarget} {
		x, err := f.s.Get(f.ctx, r.Key())
		require.NoError(t, err)
		require.Equal(t, r.ResourceVersion, x.ResourceVersion, "%s unchanged", r.Key())
	}
	// The dependent's edge went with it: the owner can go now.
	got, err = f.s.CollectBatch(f.ctx, []catalog.CollectItem{item(owner)})
	require.NoError(t, err)
	require.Equal(t, []string{owner.UID}, got)

	// The feed has one DELETED event for each, in the items' order, with
	// no gap; it carries the last stored document, with the event's
	// version as its resourceVersion.
	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{FromVersion: from})
	require.NoError(t, err)
	defer sub.Close()
	evs := collect(t, sub, 5)
	want := []*catalog.Resource{leaf, sched, dep, dangling, owner}
	for i, ev := range evs {
		require.Equal(t, from+int64(i)+1, ev.Version, "versions have no gap")
		require.Equal(t, catalog.EventDeleted, ev.Type)
		d, w := ev.Resource, want[i]
		require.Equal(t, w.Key(), d.Key())
		require.Equal(t, w.UID, d.UID)
		require.Equal(t, ev.Version, d.ResourceVersion, "%s: the document's resourceVersion is the event's", d.Key())
		require.Equal(t, w.Phase, d.Phase, "the last stored state")
		require.Equal(t, w.Labels, d.Labels, "the rest of the document is kept")
		require.Equal(t, w.Owners, d.Owners)
		require.Equal(t, w.CreatedAt, d.CreatedAt)
	}
	cur, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	require.Equal(t, from+5, cur)
	// Nothing to collect: nothing written.
	got, err = f.s.CollectBatch(f.ctx, []catalog.CollectItem{item(fin)})
	require.NoError(t, err)
	require.Empty(t, got)
}

// testCollectBatchReplacesTombstone: a tombstone left by an earlier
// resource with the same UID is replaced by the new one's.
func testCollectBatchReplacesTombstone(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const uid = "0190c0de-0000-7000-8000-000000000001"
	for _, name := range []string{"first", "second"} {
		r := f.create(t, &catalog.Resource{Kind: "Pod", Namespace: "ns", Name: name, UID: uid})
		got, err := f.s.CollectBatch(f.ctx, []catalog.CollectItem{{UID: uid, ResourceVersion: r.ResourceVersion, Reason: name}})
		require.NoError(t, err)
		require.Equal(t, []string{uid}, got)
	}
	ts, err := f.s.GetTombstone(f.ctx, key("Pod", "ns", "second"))
	require.NoError(t, err)
	require.Equal(t, uid, ts.UID)
	require.Equal(t, key("Pod", "ns", "second"), ts.Key)
	require.Equal(t, "second", ts.Reason)
	_, err = f.s.GetTombstone(f.ctx, key("Pod", "ns", "first"))
	require.ErrorIs(t, err, catalog.ErrNotFound, "replaced")
}

// testPurgeTakesTheEdges: a purged resource's owner and reference edges go
// with it (the catalog deletes them itself): its owner and the target of
// its block reference hold nothing any more, so CollectBatch takes them.
func testPurgeTakesTheEdges(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	for _, viaBatch := range []bool{false, true} {
		suffix := "-purge"
		if viaBatch {
			suffix = "-batch"
		}
		owner := f.create(t, res("App", "ns", "owner"+suffix, nil))
		target := f.create(t, res("Volume", "ns", "target"+suffix, nil))
		dep := f.create(t, &catalog.Resource{Kind: "Pod", Namespace: "ns", Name: "dep" + suffix,
			Owners:     []catalog.OwnerRef{{UID: owner.UID, Kind: "App", Name: owner.Name, BlockOwnerDeletion: true}},
			References: []catalog.Reference{{Kind: "Volume", Namespace: "ns", Name: target.Name, OnTargetDelete: catalog.RefBlock}}})
		item := func(r *catalog.Resource) catalog.CollectItem {
			return catalog.CollectItem{UID: r.UID, ResourceVersion: r.ResourceVersion, Reason: "collected"}
		}
		got, err := f.s.CollectBatch(f.ctx, []catalog.CollectItem{item(owner), item(target)})
		require.NoError(t, err)
		require.Empty(t, got, "a dependent and a block referrer hold them")
		if viaBatch {
			got, err := f.s.CollectBatch(f.ctx, []catalog.CollectItem{item(dep)})
			require.NoError(t, err)
			require.Equal(t, []string{dep.UID}, got)
		} else {
			_, err := f.s.Delete(f.ctx, dep.Key(), catalog.DeleteOptions{})
			require.NoError(t, err)
			require.NoError(t, f.s.Purge(f.ctx, dep.Key(), catalog.PurgeOptions{}))
		}
		deps, err := f.s.Dependents(f.ctx, owner.UID)
		require.NoError(t, err)
		require.Empty(t, deps)
		got, err = f.s.CollectBatch(f.ctx, []catalog.CollectItem{item(owner), item(target)})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{owner.UID, target.UID}, got, "no edge of the purged dependent is left (%s)", suffix)
	}
}

// testPurgeRemovesItsFinalizer: Purge with Finalizer writes what
// RemoveFinalizer and then Purge write (an UPDATED event without the
// finalizer, then the DELETED event at the next version; a
// remove-finalizer then a purge audit entry), in one transaction; when
// another finalizer remains it is refused and writes nothing.
func testPurgeRemovesItsFinalizer(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	ctx := catalog.WithActor(f.ctx, "gc")
	held := f.create(t, res("App", "ns", "held", nil))
	_, err := f.s.Delete(ctx, held.Key(), catalog.DeleteOptions{Finalizers: []string{catalog.FinalizerCascade, "example.com/drain"}})
	require.NoError(t, err)
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	err = f.s.Purge(ctx, held.Key(), catalog.PurgeOptions{Finalizer: catalog.FinalizerCascade})
	requireTransition(t, err, catalog.PhaseDeleting, catalog.PhasePurged)
	cur, err := f.s.Get(f.ctx, held.Key())
	require.NoError(t, err)
	require.Equal(t, []string{catalog.FinalizerCascade, "example.com/drain"}, cur.Finalizers, "refused: nothing removed")
	v, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	require.Equal(t, v0, v, "refused: no version used")

	r := f.create(t, res("App", "ns", "last", nil))
	d, err := f.s.Delete(ctx, r.Key(), catalog.DeleteOptions{Finalizers: []string{catalog.FinalizerCascade}})
	require.NoError(t, err)
	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{FromVersion: d.ResourceVersion})
	require.NoError(t, err)
	defer sub.Close()
	require.NoError(t, f.s.Purge(ctx, r.Key(), catalog.PurgeOptions{Finalizer: catalog.FinalizerCascade, Reason: "cascade done"}))
	evs := collect(t, sub, 2)
	require.Equal(t, catalog.EventUpdated, evs[0].Type)
	require.Equal(t, d.ResourceVersion+1, evs[0].Version)
	require.Empty(t, evs[0].Resource.Finalizers)
	require.Equal(t, catalog.PhaseDeleting, evs[0].Resource.Phase)
	require.Equal(t, catalog.EventDeleted, evs[1].Type)
	require.Equal(t, d.ResourceVersion+2, evs[1].Version)
	require.Empty(t, evs[1].Resource.Finalizers)
	_, err = f.s.Get(f.ctx, r.Key())
	require.ErrorIs(t, err, catalog.ErrNotFound)
	ts, err := f.s.GetTombstone(f.ctx, r.Key())
	require.NoError(t, err)
	require.Equal(t, "cascade done", ts.Reason)
	entries, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r.UID})
	require.NoError(t, err)
	var actions []string
	for _, e := range entries {
		actions = append(actions, e.Action+" "+string(e.FromPhase)+"→"+string(e.ToPhase)+" "+e.Reason)
	}
	require.Equal(t, []string{
		"create →Active ",
		"delete Active→Deleting ",
		"remove-finalizer Deleting→Deleting " + catalog.FinalizerCascade,
		"purge Deleting→Purged cascade done",
	}, actions)

	// An absent finalizer: a plain purge.
	r2 := f.create(t, res("App", "ns", "plain", nil))
	_, err = f.s.Delete(ctx, r2.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(ctx, r2.Key(), catalog.PurgeOptions{Finalizer: catalog.FinalizerCascade}))
	entries, err = f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r2.UID})
	require.NoError(t, err)
	require.Equal(t, "purge", entries[len(entries)-1].Action)
	require.Equal(t, "delete", entries[len(entries)-2].Action)
}

// testCollectBatchConcurrentWriters: batch purges race with writers that
// give the candidates dependents. CollectBatch is serialized with every
// resource writer (the version counter's lock, taken before it looks):
// no dependent is left owned by a purged resource, no write fails, and
// the feed's versions stay consecutive.
func testCollectBatchConcurrentWriters(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const owners = 150
	var cands []*catalog.Resource
	for i := range owners {
		cands = append(cands, f.create(t, res("App", "ns", fmt.Sprintf("owner-%03d", i), nil)))
	}
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{FromVersion: v0})
	require.NoError(t, err)
	defer sub.Close()

	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		purged     int
		dependents []*catalog.Resource
	)
	wg.Add(3)
	go func() { // the collector, in small batches
		defer wg.Done()
		for i := 0; i < owners; i += 3 {
			var items []catalog.CollectItem
			for _, c := range cands[i : i+3] {
				items = append(items, catalog.CollectItem{UID: c.UID, ResourceVersion: c.ResourceVersion})
			}
			got, err := f.s.CollectBatch(f.ctx, items)
			assert.NoError(t, err)
			mu.Lock()
			purged += len(got)
			mu.Unlock()
		}
	}()
	for w := range 2 { // writers giving the candidates dependents
		go func() {
			defer wg.Done()
			for i := w; i < owners; i += 2 {
				c := cands[i]
				// WriteBatch checks that the owner exists (Create does not).
				ds, err := f.s.WriteBatch(f.ctx, []catalog.Write{{Create: true, Resource: &catalog.Resource{
					Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("dep-%03d", i),
					Owners: []catalog.OwnerRef{{UID: c.UID, Kind: c.Kind, Name: c.Name}}}}})
				if err != nil {
					assert.ErrorIs(t, err, catalog.ErrNotFound, "only a purged owner refuses the dependent")
					continue
				}
				mu.Lock()
				dependents = append(dependents, ds[0])
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, d := range dependents {
		_, err := f.s.GetByUID(f.ctx, d.Owners[0].UID)
		assert.NoError(t, err, "%s was created with its owner, so the owner was not purged", d.Key())
	}
	evs := collect(t, sub, purged+len(dependents))
	for i, ev := range evs {
		require.Equal(t, v0+int64(i)+1, ev.Version, "versions are consecutive")
	}
	cv, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	require.Equal(t, v0+int64(len(evs)), cv)
}
