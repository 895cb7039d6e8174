package catalogtest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testAudit(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	r := f.create(t, res("Backup", "ns", "b", nil))
	f.create(t, res("Restore", "ns", "b", nil))
	f.create(t, res("Restore", "other", "b", nil))
	f.clock.Advance(time.Minute)
	_, err := f.s.Schedule(catalog.WithActor(f.ctx, "alice"), r.Key(), catalog.ScheduleOptions{Delay: time.Hour, Reason: "ttl expired"})
	require.NoError(t, err)
	_, err = f.s.Undelete(catalog.WithActor(f.ctx, "bob"), r.Key(), "still needed")
	require.NoError(t, err)
	f.clock.Advance(time.Minute)
	_, err = f.s.Delete(catalog.WithActor(f.ctx, "carol"), r.Key(), catalog.DeleteOptions{Finalizers: []string{"a/b"}})
	require.NoError(t, err)
	_, err = f.s.RemoveFinalizer(catalog.WithActor(f.ctx, "ctrl"), r.Key(), "a/b")
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(catalog.WithActor(f.ctx, "gc"), r.Key(), catalog.PurgeOptions{Reason: "finalized"}))
	require.NoError(t, f.s.AppendAudit(f.ctx, catalog.AuditEntry{Actor: "plugin", Action: "plugin-report", Kind: "Backup", Namespace: "ns", Name: "b", UID: r.UID, Details: json.RawMessage(`{"items":3}`)}))
	require.ErrorIs(t, f.s.AppendAudit(f.ctx, catalog.AuditEntry{Actor: "x"}), catalog.ErrInvalid)

	all, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "Backup", Name: "b"})
	require.NoError(t, err)
	var actions []string
	for _, e := range all {
		actions = append(actions, e.Action)
		assert.Equal(t, r.UID, e.UID)
	}
	assert.Equal(t, []string{"create", "schedule", "undelete", "delete", "remove-finalizer", "purge", "plugin-report"}, actions, "oldest first")
	assert.Equal(t, "tester", all[0].Actor, "Create takes the actor from the context")
	assert.Equal(t, catalog.PhaseActive, all[1].FromPhase)
	assert.Equal(t, catalog.PhaseScheduled, all[1].ToPhase)
	assert.Equal(t, "alice", all[1].Actor)
	assert.Equal(t, "ttl expired", all[1].Reason)
	assert.True(t, all[1].Time.Equal(Epoch.Add(time.Minute)))
	assert.Equal(t, catalog.PhasePurged, all[5].ToPhase)
	assert.JSONEq(t, `{"items":3}`, string(all[6].Details))
	assert.IsIncreasing(t, []int64{all[0].ID, all[1].ID, all[2].ID, all[6].ID})

	last2, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r.UID, Limit: 2})
	require.NoError(t, err)
	require.Len(t, last2, 2)
	assert.Equal(t, "purge", last2[0].Action, "Limit keeps the newest, oldest first")
	since, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Since: Epoch.Add(2 * time.Minute)})
	require.NoError(t, err)
	assert.Len(t, since, 4)
	restores, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "Restore"})
	require.NoError(t, err)
	assert.Len(t, restores, 2)
	// Namespace keeps only that namespace's entries.
	other, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "Restore", Name: "b", Namespace: "other"})
	require.NoError(t, err)
	require.Len(t, other, 1)
	assert.Equal(t, "other", other[0].Namespace)
	inNS, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Namespace: "ns"})
	require.NoError(t, err)
	assert.Len(t, inNS, 8, "the backup's 7 and the restore's create")
}
