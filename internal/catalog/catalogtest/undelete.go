package catalogtest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testUndeleteLeavesTheCascades: an undeleted resource leaves the
// cascades that reach it, in the undelete's transaction: its owner edges
// to owners that are Deleting or gone, and its cascade references to
// targets that are Deleting, go; those to owners and targets not being
// deleted, and references of other policies, stay. The feed has the
// undelete (with the edges it had) and then the leave-cascade write, one
// version apart; the audit log has both.
func testUndeleteLeavesTheCascades(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	deleting := f.create(t, res("App", "ns", "deleting", nil))
	active := f.create(t, res("App", "ns", "active", nil))
	gone := f.create(t, res("App", "ns", "gone", nil))
	target := f.create(t, res("Account", "ns", "target", nil))
	kept := f.create(t, res("Account", "ns", "kept", nil))
	d := res("Volume", "ns", "d", nil)
	d.Owners = []catalog.OwnerRef{
		{UID: deleting.UID, Kind: "App", Name: "deleting", BlockOwnerDeletion: true},
		{UID: active.UID, Kind: "App", Name: "active"},
		{UID: gone.UID, Kind: "App", Name: "gone"},
	}
	d.References = []catalog.Reference{
		{Kind: "Account", Namespace: "ns", Name: "target", OnTargetDelete: catalog.RefCascade},
		{Kind: "Account", Namespace: "ns", Name: "kept", OnTargetDelete: catalog.RefCascade},
	}
	d = f.create(t, d)
	x := res("Report", "ns", "x", nil)
	x.References = []catalog.Reference{{Kind: "Account", Namespace: "ns", Name: "target", OnTargetDelete: catalog.RefBlock}}
	x = f.create(t, x)

	_, err := f.s.Delete(f.ctx, deleting.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	_, err = f.s.Delete(f.ctx, target.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	_, err = f.s.Delete(f.ctx, gone.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(f.ctx, gone.Key(), catalog.PurgeOptions{}))
	root := deleting.Ref()
	s, err := f.s.Schedule(f.ctx, d.Key(), catalog.ScheduleOptions{Delay: time.Hour, Root: &root})
	require.NoError(t, err)
	require.Equal(t, &root, s.DeletionRoot)
	_, err = f.s.Schedule(f.ctx, x.Key(), catalog.ScheduleOptions{Delay: time.Hour})
	require.NoError(t, err)

	from, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	u, err := f.s.Undelete(catalog.WithActor(f.ctx, "bob"), d.Key(), "kept")
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, u.Phase)
	require.Nil(t, u.DeletionRoot)
	require.Equal(t, []catalog.OwnerRef{{UID: active.UID, Kind: "App", Name: "active"}}, u.Owners)
	require.Equal(t, []catalog.Reference{{Kind: "Account", Namespace: "ns", Name: "kept", OnTargetDelete: catalog.RefCascade}}, u.References)
	require.Equal(t, from+2, u.ResourceVersion, "the undelete, then the leave-cascade write")
	got, err := f.s.Get(f.ctx, d.Key())
	require.NoError(t, err)
	require.Equal(t, u.Owners, got.Owners)
	require.Equal(t, u.References, got.References)

	// The edges follow: d is no dependent of the deleting owner, nor a
	// referrer of the deleting target, any more.
	deps, err := f.s.Dependents(f.ctx, deleting.UID)
	require.NoError(t, err)
	assert.Empty(t, deps)
	deps, err = f.s.Dependents(f.ctx, gone.UID)
	require.NoError(t, err)
	assert.Empty(t, deps)
	deps, err = f.s.Dependents(f.ctx, active.UID)
	require.NoError(t, err)
	require.Len(t, deps, 1)
	refs, err := f.s.Referrers(f.ctx, target.Key())
	require.NoError(t, err)
	require.Len(t, refs, 1, "the block referrer stays")
	assert.Equal(t, x.UID, refs[0].UID)
	refs, err = f.s.Referrers(f.ctx, kept.Key())
	require.NoError(t, err)
	require.Len(t, refs, 1)

	// The feed: the undelete with the edges it had, then without.
	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{FromVersion: from})
	require.NoError(t, err)
	defer sub.Close()
	var evs []catalog.Event
	for len(evs) < 2 {
		select {
		case ev := <-sub.Events():
			evs = append(evs, ev)
		case <-time.After(10 * time.Second):
			t.Fatalf("the feed sent %d of 2 events", len(evs))
		}
	}
	require.Equal(t, catalog.PhaseActive, evs[0].Resource.Phase)
	require.Len(t, evs[0].Resource.Owners, 3, "the undelete's event carries the owners it leaves")
	require.Equal(t, from+1, evs[0].Version)
	require.Len(t, evs[1].Resource.Owners, 1)
	require.Equal(t, from+2, evs[1].Version)

	es, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: d.UID})
	require.NoError(t, err)
	last := es[len(es)-1]
	require.Equal(t, "undelete", es[len(es)-2].Action)
	require.Equal(t, catalog.AuditLeaveCascade, last.Action)
	require.Equal(t, "bob", last.Actor)
	assert.Contains(t, last.Reason, "owner App/ns/deleting (Deleting) no longer owns it")
	assert.Contains(t, last.Reason, "owner App/ns/gone (Purged) no longer owns it")
	assert.Contains(t, last.Reason, "its cascade reference to Account/ns/target (Deleting) removed")
	var details struct {
		Owners     []map[string]any `json:"owners"`
		References []map[string]any `json:"references"`
	}
	require.NoError(t, json.Unmarshal(last.Details, &details))
	assert.Len(t, details.Owners, 2)
	assert.Len(t, details.References, 1)

	// A resource no cascade reaches is undeleted in one write.
	from, err = f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	ux, err := f.s.Undelete(f.ctx, x.Key(), "")
	require.NoError(t, err)
	require.Equal(t, from+1, ux.ResourceVersion)
	require.Len(t, ux.References, 1, "a block reference is no cascade")
}

// testDeletionRoot: a cascade's root is stored by Schedule and Delete
// (named in the audit entry's details), kept from Schedule to Delete,
// kept by Update, copied to the tombstone, and cleared by Undelete and
// Create.
func testDeletionRoot(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	owner := f.create(t, res("App", "ns", "o", nil))
	root := owner.Ref()
	in := res("Volume", "ns", "v", nil)
	in.DeletionRoot = &root
	r := f.create(t, in)
	require.Nil(t, r.DeletionRoot, "Create ignores it")

	s, err := f.s.Schedule(f.ctx, r.Key(), catalog.ScheduleOptions{Delay: time.Hour, Root: &root})
	require.NoError(t, err)
	require.Equal(t, &root, s.DeletionRoot)
	s.DeletionRoot = nil
	s.Labels = map[string]string{"a": "b"}
	s, err = f.s.Update(f.ctx, s)
	require.NoError(t, err)
	require.Equal(t, &root, s.DeletionRoot, "Update keeps it")
	f.clock.Advance(2 * time.Hour)
	dl, err := f.s.Delete(f.ctx, r.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.Equal(t, &root, dl.DeletionRoot, "Delete keeps Schedule's")
	es, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r.UID})
	require.NoError(t, err)
	for _, e := range es {
		if e.Action == "schedule" || e.Action == "delete" {
			require.JSONEq(t, `{"deletionRoot":{"kind":"App","namespace":"ns","name":"o","uid":"`+owner.UID+`"}}`, string(e.Details), e.Action)
		}
	}
	require.NoError(t, f.s.Purge(f.ctx, r.Key(), catalog.PurgeOptions{}))
	ts, err := f.s.GetTombstone(f.ctx, r.Key())
	require.NoError(t, err)
	require.Equal(t, &root, ts.DeletionRoot)

	// Delete's own root, and Undelete clears Schedule's.
	w := f.create(t, res("Volume", "ns", "w", nil))
	other := w.Ref()
	dw, err := f.s.Delete(f.ctx, w.Key(), catalog.DeleteOptions{Root: &other})
	require.NoError(t, err)
	require.Equal(t, &other, dw.DeletionRoot)
	y := f.create(t, res("Volume", "ns", "y", nil))
	_, err = f.s.Schedule(f.ctx, y.Key(), catalog.ScheduleOptions{Delay: time.Hour, Root: &root})
	require.NoError(t, err)
	uy, err := f.s.Undelete(f.ctx, y.Key(), "")
	require.NoError(t, err)
	require.Nil(t, uy.DeletionRoot)
	dy, err := f.s.Delete(f.ctx, y.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.Nil(t, dy.DeletionRoot, "a requested deletion has no root")
}
