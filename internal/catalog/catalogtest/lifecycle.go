package catalogtest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testLifecycle(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	r := f.create(t, res("Backup", "ns", "b", nil))
	k := r.Key()

	// Active → Scheduled.
	s, err := f.s.Schedule(catalog.WithActor(f.ctx, "alice"), k, catalog.ScheduleOptions{Delay: time.Hour, Propagation: catalog.PropagationBackground, Reason: "ttl"})
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseScheduled, s.Phase)
	require.NotNil(t, s.DeletionDueAt)
	assert.True(t, s.DeletionDueAt.Equal(Epoch.Add(time.Hour)))
	assert.Equal(t, Epoch.Format(time.RFC3339Nano), s.Annotations[catalog.AnnotationDeletionScheduledAt])
	assert.Greater(t, s.ResourceVersion, r.ResourceVersion)

	// Scheduled → Active.
	u, err := f.s.Undelete(catalog.WithActor(f.ctx, "bob"), k, "oops")
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseActive, u.Phase)
	assert.Nil(t, u.DeletionDueAt)
	assert.NotContains(t, u.Annotations, catalog.AnnotationDeletionScheduledAt)

	// Scheduled, not yet due → Deleting needs Force.
	_, err = f.s.Schedule(catalog.WithActor(f.ctx, "alice"), k, catalog.ScheduleOptions{Delay: time.Hour})
	require.NoError(t, err)
	_, err = f.s.Delete(catalog.WithActor(f.ctx, "alice"), k, catalog.DeleteOptions{})
	requireTransition(t, err, catalog.PhaseScheduled, catalog.PhaseDeleting)
	// Once due, no Force is needed.
	f.clock.Advance(time.Hour)
	d, err := f.s.Delete(catalog.WithActor(f.ctx, "gc"), k, catalog.DeleteOptions{Finalizers: []string{catalog.FinalizerDeleteActions, catalog.FinalizerCascade, catalog.FinalizerCascade}})
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseDeleting, d.Phase)
	require.NotNil(t, d.DeletionTimestamp)
	assert.True(t, d.DeletionTimestamp.Equal(Epoch.Add(time.Hour)))
	assert.Nil(t, d.DeletionDueAt)
	assert.Equal(t, []string{catalog.FinalizerDeleteActions, catalog.FinalizerCascade}, d.Finalizers)
	assert.Equal(t, catalog.PropagationForeground, d.PropagationPolicy)

	// Purge waits for the finalizers.
	err = f.s.Purge(catalog.WithActor(f.ctx, "gc"), k, catalog.PurgeOptions{})
	requireTransition(t, err, catalog.PhaseDeleting, catalog.PhasePurged)
	d, err = f.s.RemoveFinalizer(catalog.WithActor(f.ctx, "gc"), k, catalog.FinalizerCascade)
	require.NoError(t, err)
	assert.Equal(t, []string{catalog.FinalizerDeleteActions}, d.Finalizers)
	again, err := f.s.RemoveFinalizer(catalog.WithActor(f.ctx, "gc"), k, catalog.FinalizerCascade)
	require.NoError(t, err, "removing an absent finalizer is a no-op")
	assert.Equal(t, d.ResourceVersion, again.ResourceVersion)
	_, err = f.s.RemoveFinalizer(catalog.WithActor(f.ctx, "gc"), k, catalog.FinalizerDeleteActions)
	require.NoError(t, err)

	require.NoError(t, f.s.Purge(catalog.WithActor(f.ctx, "gc"), k, catalog.PurgeOptions{Reason: "done", Details: json.RawMessage(`{"plugins":1}`)}))
	_, err = f.s.Get(f.ctx, k)
	require.ErrorIs(t, err, catalog.ErrNotFound)
	ts, err := f.s.GetTombstone(f.ctx, k)
	require.NoError(t, err)
	assert.Equal(t, r.UID, ts.UID)
	assert.Equal(t, "gc", ts.Actor)
	assert.Equal(t, "done", ts.Reason)
	assert.JSONEq(t, `{"plugins":1}`, string(ts.Details))
	assert.True(t, ts.PurgedAt.Equal(Epoch.Add(time.Hour)))
	_, err = f.s.GetTombstone(f.ctx, key("Backup", "ns", "never"))
	require.ErrorIs(t, err, catalog.ErrNotFound)

	// Active → Deleting directly, with Force on a not-yet-due Scheduled,
	// and a forced purge despite finalizers.
	r2 := f.create(t, res("Backup", "ns", "b2", nil))
	_, err = f.s.Schedule(f.ctx, r2.Key(), catalog.ScheduleOptions{Delay: 24 * time.Hour})
	require.NoError(t, err)
	d2, err := f.s.Delete(f.ctx, r2.Key(), catalog.DeleteOptions{Force: true, Propagation: catalog.PropagationOrphan, Finalizers: []string{"x/y"}})
	require.NoError(t, err)
	assert.Equal(t, catalog.PropagationOrphan, d2.PropagationPolicy)
	require.NoError(t, f.s.Purge(catalog.WithActor(f.ctx, "op"), r2.Key(), catalog.PurgeOptions{Force: true}))
	audit, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r2.UID})
	require.NoError(t, err)
	require.NotEmpty(t, audit)
	last := audit[len(audit)-1]
	assert.Equal(t, "force-purge", last.Action)
	assert.Contains(t, string(last.Details), "x/y")

	r3 := f.create(t, res("Backup", "ns", "b3", nil))
	d3, err := f.s.Delete(f.ctx, r3.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseDeleting, d3.Phase)
	require.NoError(t, f.s.Purge(f.ctx, r3.Key(), catalog.PurgeOptions{}))

	// The key can be reused after a purge; the new tombstone wins later.
	r4 := f.create(t, res("Backup", "ns", "b", nil))
	assert.NotEqual(t, r.UID, r4.UID)
}

func testIllegalTransitions(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	active := f.create(t, res("K", "", "active", nil)).Key()
	scheduled := f.create(t, res("K", "", "scheduled", nil)).Key()
	_, err := f.s.Schedule(f.ctx, scheduled, catalog.ScheduleOptions{Delay: time.Hour})
	require.NoError(t, err)
	deleting := f.create(t, res("K", "", "deleting", nil)).Key()
	_, err = f.s.Delete(f.ctx, deleting, catalog.DeleteOptions{Finalizers: []string{"a/b"}})
	require.NoError(t, err)

	for _, tc := range []struct {
		name     string
		do       func() error
		from, to catalog.Phase
	}{
		{"undelete active", func() error { _, err := f.s.Undelete(f.ctx, active, ""); return err }, catalog.PhaseActive, catalog.PhaseActive},
		{"purge active", func() error { return f.s.Purge(f.ctx, active, catalog.PurgeOptions{}) }, catalog.PhaseActive, catalog.PhasePurged},
		{"force purge active", func() error { return f.s.Purge(f.ctx, active, catalog.PurgeOptions{Force: true}) }, catalog.PhaseActive, catalog.PhasePurged},
		{"remove finalizer active", func() error { _, err := f.s.RemoveFinalizer(f.ctx, active, "a/b"); return err }, catalog.PhaseActive, catalog.PhaseActive},
		{"schedule scheduled", func() error {
			_, err := f.s.Schedule(f.ctx, scheduled, catalog.ScheduleOptions{Delay: time.Minute})
			return err
		}, catalog.PhaseScheduled, catalog.PhaseScheduled},
		{"delete scheduled early", func() error { _, err := f.s.Delete(f.ctx, scheduled, catalog.DeleteOptions{}); return err }, catalog.PhaseScheduled, catalog.PhaseDeleting},
		{"purge scheduled", func() error { return f.s.Purge(f.ctx, scheduled, catalog.PurgeOptions{Force: true}) }, catalog.PhaseScheduled, catalog.PhasePurged},
		{"schedule deleting", func() error {
			_, err := f.s.Schedule(f.ctx, deleting, catalog.ScheduleOptions{Delay: time.Minute})
			return err
		}, catalog.PhaseDeleting, catalog.PhaseScheduled},
		{"undelete deleting", func() error { _, err := f.s.Undelete(f.ctx, deleting, ""); return err }, catalog.PhaseDeleting, catalog.PhaseActive},
		{"delete active only if scheduled", func() error {
			_, err := f.s.Delete(f.ctx, active, catalog.DeleteOptions{OnlyIfScheduled: true, Force: true})
			return err
		}, catalog.PhaseActive, catalog.PhaseDeleting},
		{"delete deleting", func() error { _, err := f.s.Delete(f.ctx, deleting, catalog.DeleteOptions{Force: true}); return err }, catalog.PhaseDeleting, catalog.PhaseDeleting},
		{"purge with finalizers", func() error { return f.s.Purge(f.ctx, deleting, catalog.PurgeOptions{}) }, catalog.PhaseDeleting, catalog.PhasePurged},
		{"add finalizer while deleting", func() error {
			cur, err := f.s.Get(f.ctx, deleting)
			require.NoError(t, err)
			cur.Finalizers = append(cur.Finalizers, "new/one")
			_, err = f.s.Update(f.ctx, cur)
			return err
		}, catalog.PhaseDeleting, catalog.PhaseDeleting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v0, err := f.s.CurrentVersion(f.ctx)
			require.NoError(t, err)
			requireTransition(t, tc.do(), tc.from, tc.to)
			v1, err := f.s.CurrentVersion(f.ctx)
			require.NoError(t, err)
			assert.Equal(t, v0, v1, "a refused transition writes nothing")
		})
	}

	// Every lifecycle method on a missing key is ErrNotFound.
	missing := key("K", "", "missing")
	for name, do := range map[string]func() error{
		"schedule": func() error { _, err := f.s.Schedule(f.ctx, missing, catalog.ScheduleOptions{}); return err },
		"undelete": func() error { _, err := f.s.Undelete(f.ctx, missing, ""); return err },
		"delete":   func() error { _, err := f.s.Delete(f.ctx, missing, catalog.DeleteOptions{}); return err },
		"remove":   func() error { _, err := f.s.RemoveFinalizer(f.ctx, missing, "a"); return err },
		"purge":    func() error { return f.s.Purge(f.ctx, missing, catalog.PurgeOptions{}) },
	} {
		require.ErrorIs(t, do(), catalog.ErrNotFound, name)
	}
	_, err = f.s.Schedule(f.ctx, active, catalog.ScheduleOptions{Delay: -time.Second})
	require.ErrorIs(t, err, catalog.ErrInvalid)
	_, err = f.s.Delete(f.ctx, active, catalog.DeleteOptions{Propagation: "Sideways"})
	require.ErrorIs(t, err, catalog.ErrInvalid)

	// Removing the last finalizer by Update is allowed while Deleting.
	cur, err := f.s.Get(f.ctx, deleting)
	require.NoError(t, err)
	cur.Finalizers = nil
	_, err = f.s.Update(f.ctx, cur)
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(f.ctx, deleting, catalog.PurgeOptions{}))
}

func testDue(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	_, ok, err := f.s.NextDue(f.ctx)
	require.NoError(t, err)
	assert.False(t, ok)
	for i, d := range []time.Duration{3 * time.Hour, time.Hour, 2 * time.Hour} {
		r := f.create(t, res("K", "", fmt.Sprintf("r%d", i), nil))
		_, err := f.s.Schedule(f.ctx, r.Key(), catalog.ScheduleOptions{Delay: d})
		require.NoError(t, err)
	}
	f.create(t, res("K", "", "active", nil))
	next, ok, err := f.s.NextDue(f.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, next.Equal(Epoch.Add(time.Hour)))

	due, err := f.s.DueScheduled(f.ctx, Epoch.Add(30*time.Minute), 10)
	require.NoError(t, err)
	assert.Empty(t, due)
	due, err = f.s.DueScheduled(f.ctx, Epoch.Add(2*time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, due, 2)
	assert.Equal(t, "r1", due[0].Name, "oldest first")
	assert.Equal(t, "r2", due[1].Name)
	due, err = f.s.DueScheduled(f.ctx, Epoch.Add(5*time.Hour), 1)
	require.NoError(t, err)
	require.Len(t, due, 1)

	// Undelete and Delete take a resource off the due index.
	_, err = f.s.Undelete(f.ctx, key("K", "", "r1"), "")
	require.NoError(t, err)
	_, err = f.s.Delete(f.ctx, key("K", "", "r2"), catalog.DeleteOptions{Force: true})
	require.NoError(t, err)
	next, ok, err = f.s.NextDue(f.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, next.Equal(Epoch.Add(3*time.Hour)))
}

func testDependents(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	owner := f.create(t, res("Backup", "ns", "owner", nil))
	other := f.create(t, res("Backup", "ns", "other", nil))
	for i := range 3 {
		d := res("Snapshot", "ns", fmt.Sprintf("s%d", i), nil)
		d.Owners = []catalog.OwnerRef{{UID: owner.UID, Kind: "Backup", Name: "owner", BlockOwnerDeletion: i == 0}}
		f.create(t, d)
	}
	both := res("Snapshot", "ns", "both", nil)
	both.Owners = []catalog.OwnerRef{{UID: owner.UID, Kind: "Backup", Name: "owner"}, {UID: other.UID, Kind: "Backup", Name: "other"}}
	f.create(t, both)

	deps, err := f.s.Dependents(f.ctx, owner.UID)
	require.NoError(t, err)
	var names []string
	for _, d := range deps {
		names = append(names, d.Name)
	}
	assert.Equal(t, []string{"both", "s0", "s1", "s2"}, names)
	assert.True(t, deps[1].Owners[0].BlockOwnerDeletion)

	od, err := f.s.Dependents(f.ctx, other.UID)
	require.NoError(t, err)
	require.Len(t, od, 1)

	// Update rewrites the edges.
	cur, err := f.s.Get(f.ctx, key("Snapshot", "ns", "both"))
	require.NoError(t, err)
	cur.Owners = cur.Owners[1:]
	_, err = f.s.Update(f.ctx, cur)
	require.NoError(t, err)
	deps, err = f.s.Dependents(f.ctx, owner.UID)
	require.NoError(t, err)
	assert.Len(t, deps, 3)

	// Purge removes the edges.
	_, err = f.s.Delete(f.ctx, key("Snapshot", "ns", "s1"), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(f.ctx, key("Snapshot", "ns", "s1"), catalog.PurgeOptions{}))
	deps, err = f.s.Dependents(f.ctx, owner.UID)
	require.NoError(t, err)
	assert.Len(t, deps, 2)

	none, err := f.s.Dependents(f.ctx, "nobody")
	require.NoError(t, err)
	assert.Empty(t, none)
}

func testReferrers(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	target := key("Bucket", "", "b1")
	for i, pol := range []catalog.OnTargetDelete{catalog.RefBlock, catalog.RefUnset, catalog.RefCascade} {
		r := res("Backup", "ns", fmt.Sprintf("r%d", i), nil)
		r.References = []catalog.Reference{{Kind: "Bucket", Name: "b1", OnTargetDelete: pol}}
		f.create(t, r)
	}
	elsewhere := res("Backup", "ns", "elsewhere", nil)
	elsewhere.References = []catalog.Reference{{Kind: "Bucket", Name: "b2", OnTargetDelete: catalog.RefAllowDangling}}
	f.create(t, elsewhere)

	refs, err := f.s.Referrers(f.ctx, target)
	require.NoError(t, err)
	require.Len(t, refs, 3)
	assert.Equal(t, "r0", refs[0].Name)
	assert.Equal(t, catalog.RefBlock, refs[0].References[0].OnTargetDelete)

	cur, err := f.s.Get(f.ctx, key("Backup", "ns", "r0"))
	require.NoError(t, err)
	cur.References = nil
	_, err = f.s.Update(f.ctx, cur)
	require.NoError(t, err)
	refs, err = f.s.Referrers(f.ctx, target)
	require.NoError(t, err)
	assert.Len(t, refs, 2)

	_, err = f.s.Delete(f.ctx, key("Backup", "ns", "r1"), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(f.ctx, key("Backup", "ns", "r1"), catalog.PurgeOptions{}))
	refs, err = f.s.Referrers(f.ctx, target)
	require.NoError(t, err)
	require.Len(t, refs, 1)
	assert.Equal(t, "r2", refs[0].Name)
}
