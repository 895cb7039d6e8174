package deletion_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/retention"
)

// TestUndeletingWhatAPolicyScheduledHoldsIt pins DESIGN §10 "a hold wins"
// at undelete: undeleting a backup a RetentionPolicy scheduled labels it
// lethe.io/retain=true, naming the policy (without the leader's term), or
// the policy would schedule it again at its next run; a backup scheduled
// by hand gets no hold. The schedule entry counts even when it is the
// oldest of the 50 entries read.
func TestUndeletingWhatAPolicyScheduledHoldsIt(t *testing.T) {
	e := newEnv(t)
	delay := map[string]string{catalog.AnnotationDeletionDelay: "1h"}
	e.addBackup("by-policy", items(3), archivetest.Options{}, delay)
	e.addBackup("by-hand", items(3), archivetest.Options{}, delay)
	e.addBackup("oldest-entry", items(3), archivetest.Options{}, delay)

	rep, err := e.del.Delete(catalog.WithActor(e.ctx, retention.ActorPrefix+"nightly-gfs (leader term 3)"), "by-policy", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultScheduled, rep.Result)
	rep, err = e.del.Delete(catalog.WithActor(e.ctx, retention.ActorPrefix+"weekly"), "oldest-entry", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultScheduled, rep.Result)
	old := e.backup("oldest-entry").Resource
	for i := range 49 {
		require.NoError(t, e.store.AppendAudit(e.ctx, catalog.AuditEntry{Time: e.now, Actor: "alice", Action: "note",
			Kind: old.Kind, Name: old.Name, UID: old.UID, Reason: fmt.Sprint("note ", i)}))
	}
	r, err := e.del.Undelete(catalog.WithActor(e.ctx, "bob"), "oldest-entry")
	require.NoError(t, err)
	require.Contains(t, r.Annotations[deletion.AnnotationRetentionHold], "after RetentionPolicy weekly scheduled it")

	rep, err = e.del.Delete(catalog.WithActor(e.ctx, "alice"), "by-hand", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultScheduled, rep.Result)

	r, err = e.del.Undelete(catalog.WithActor(e.ctx, "bob"), "by-policy")
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)
	require.Equal(t, retention.HoldValue, r.Labels[retention.HoldLabel], "held: %v", r.Labels)
	require.Contains(t, r.Annotations[deletion.AnnotationRetentionHold], "after RetentionPolicy nightly-gfs scheduled it")
	require.Equal(t, retention.HoldValue, e.backup("by-policy").Resource.Labels[retention.HoldLabel], "the hold is stored")

	r, err = e.del.Undelete(catalog.WithActor(e.ctx, "bob"), "by-hand")
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)
	require.NotContains(t, r.Labels, retention.HoldLabel, "scheduled by hand: no hold")
	require.NotContains(t, e.backup("by-hand").Resource.Labels, retention.HoldLabel)
}

// TestTheNewestScheduleDecidesTheHold: what decides the hold is who
// scheduled the deletion being undone, the newest "schedule" entry, not
// an earlier one. Scheduled by hand and undeleted, then scheduled by a
// policy: undeleting that holds it, naming the policy. Scheduled by a
// policy and undeleted with the hold taken off again, then scheduled by
// hand: undeleting that puts no hold.
func TestTheNewestScheduleDecidesTheHold(t *testing.T) {
	e := newEnv(t)
	delay := map[string]string{catalog.AnnotationDeletionDelay: "1h"}
	e.addBackup("hand-then-policy", items(3), archivetest.Options{}, delay)
	e.addBackup("policy-then-hand", items(3), archivetest.Options{}, delay)
	schedule := func(actor, name string) {
		t.Helper()
		rep, err := e.del.Delete(catalog.WithActor(e.ctx, actor), name, deletion.Options{})
		require.NoError(t, err)
		require.Equal(t, deletion.ResultScheduled, rep.Result)
	}
	undelete := func(name string) *catalog.Resource {
		t.Helper()
		r, err := e.del.Undelete(catalog.WithActor(e.ctx, "bob"), name)
		require.NoError(t, err)
		require.Equal(t, catalog.PhaseActive, r.Phase)
		return r
	}

	schedule("alice", "hand-then-policy")
	require.NotContains(t, undelete("hand-then-policy").Labels, retention.HoldLabel)
	schedule(retention.ActorPrefix+"p", "hand-then-policy")
	r := undelete("hand-then-policy")
	require.Equal(t, retention.HoldValue, r.Labels[retention.HoldLabel], "held: %v", r.Labels)
	require.Contains(t, r.Annotations[deletion.AnnotationRetentionHold], "after RetentionPolicy p scheduled it")

	schedule(retention.ActorPrefix+"p", "policy-then-hand")
	r = undelete("policy-then-hand")
	require.Equal(t, retention.HoldValue, r.Labels[retention.HoldLabel])
	delete(r.Labels, retention.HoldLabel)
	_, err := e.store.Update(e.ctx, r)
	require.NoError(t, err)
	schedule("alice", "policy-then-hand")
	require.NotContains(t, undelete("policy-then-hand").Labels, retention.HoldLabel, "the newest schedule was by hand")
}
