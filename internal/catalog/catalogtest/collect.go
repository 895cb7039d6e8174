package catalogtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testCollectBatch: CollectBatch deletes and purges, in one transaction,
// exactly the resources that can go at once, writing what Delete then
// Purge would; it leaves the others unchanged.
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
		es, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r.UID})
		require.NoError(t, err)
		require.Equal(t, "delete", es[len(es)-2].Action)
		require.Equal(t, "purge", es[len(es)-1].Action)
		require.Equal(t, catalog.PhasePurged, es[len(es)-1].ToPhase)
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

	// The feed has UPDATED (Deleting) then DELETED for each, with no gap.
	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{FromVersion: from})
	require.NoError(t, err)
	defer sub.Close()
	evs := collect(t, sub, 10)
	for i, ev := range evs {
		require.Equal(t, from+int64(i)+1, ev.Version, "versions have no gap")
		// The documents are what Delete then Purge would write.
		d := ev.Resource
		require.Equal(t, ev.Version, d.ResourceVersion, "%s: the document's resourceVersion is the event's", d.Key())
		require.Equal(t, catalog.PhaseDeleting, d.Phase)
		require.NotNil(t, d.DeletionTimestamp)
		require.Nil(t, d.DeletionDueAt, "a Scheduled resource's due time goes")
		require.Equal(t, catalog.PropagationForeground, d.PropagationPolicy)
		require.Equal(t, *d.DeletionTimestamp, d.UpdatedAt)
		if d.Name == "leaf" {
			require.Equal(t, leaf.Labels, d.Labels, "the rest of the document is kept")
			require.Equal(t, leaf.CreatedAt, d.CreatedAt)
		}
		if i%2 == 0 {
			require.Equal(t, catalog.EventUpdated, ev.Type)
			require.Equal(t, catalog.PhaseDeleting, ev.Resource.Phase)
		} else {
			require.Equal(t, catalog.EventDeleted, ev.Type)
		}
	}
	cur, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	require.Equal(t, from+10, cur)
	// Nothing to collect: nothing written.
	got, err = f.s.CollectBatch(f.ctx, []catalog.CollectItem{item(fin)})
	require.NoError(t, err)
	require.Empty(t, got)
}
