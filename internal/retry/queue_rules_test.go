package retry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// TestOperatorCannotRequeueOrDiscardARowWhileItRuns: a row that a
// collector holds (Running, its lease not yet ended) is neither requeued
// nor discarded by an operator, dry run or not: either would race the run
// that holds it. Once the lease has ended (its holder died), both work.
func TestOperatorCannotRequeueOrDiscardARowWhileItRuns(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			p := policy(5)
			p.Default.Jitter = 0
			q := f.queue(t, f.st, p)
			w := f.owner(t, "w")
			rows, err := q.Record(f.ctx, failing(w, "in use"))
			require.NoError(t, err)
			id := rows[0].ID
			f.clock.Advance(p.Default.Delay(1))
			claimed, err := f.st.ClaimRetries(f.ctx, "server-a", time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			require.Equal(t, catalog.RetryRunning, claimed[0].State)

			for _, dryRun := range []bool{true, false} {
				_, err = q.RetryNow(f.ctx, id, dryRun)
				require.ErrorIs(t, err, retry.ErrRunning, "retry now, dry run %v", dryRun)
				_, err = q.Discard(f.ctx, id, dryRun)
				require.ErrorIs(t, err, retry.ErrRunning, "discard, dry run %v", dryRun)
			}
			cur, err := q.Get(f.ctx, id)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryRunning, cur.State)
			assert.Equal(t, "server-a", cur.Holder)

			// The holder died: once its lease is over, the operator may.
			f.clock.Advance(time.Minute + time.Second)
			back, err := q.RetryNow(f.ctx, id, false)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryRetryable, back.State)
			assert.Equal(t, 1, back.Attempts, "a requeue of a row that was not discarded keeps its attempts")
			f.clock.Advance(time.Second)
			claimed, err = f.st.ClaimRetries(f.ctx, "server-b", time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			f.clock.Advance(time.Minute + time.Second)
			gone, err := q.Discard(f.ctx, id, false)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryDiscarded, gone.State)
		})
	}
}

// TestRecordRefusesAnOutcomeWithoutKindOrOwner: an outcome that does not
// say what waits (its kind) and for whom (the owner's kind and name) is
// refused, and nothing is recorded.
func TestRecordRefusesAnOutcomeWithoutKindOrOwner(t *testing.T) {
	f := newFixture(t, "sqlite")
	q := f.queue(t, f.st, policy(5))
	w := f.owner(t, "w")
	for name, spoil := range map[string]func(*retry.Outcome){
		"no kind":       func(o *retry.Outcome) { o.Kind = "" },
		"no owner kind": func(o *retry.Outcome) { o.Owner.Kind = "" },
		"no owner name": func(o *retry.Outcome) { o.Owner.Name = "" },
	} {
		o := failing(w, "x")
		spoil(&o)
		_, err := q.Record(f.ctx, failing(w, "fine"), o)
		require.ErrorContains(t, err, "an outcome needs a kind and an owner", name)
	}
	rows, err := q.List(f.ctx, catalog.RetryFilter{})
	require.NoError(t, err)
	assert.Empty(t, rows, "nothing recorded")
}

// TestSucceedWithoutRowsLeavesTheOtherWritersCondition: exactly one
// writer per resource for DeletionStuck. For a kind whose owner's
// condition another engine writes (Config.OwnerSync: the collector, for
// catalog resources), a Succeed that removed no row neither touches the
// condition nor calls that engine; a Succeed that removed rows calls it,
// and still does not write the condition itself.
func TestSucceedWithoutRowsLeavesTheOtherWritersCondition(t *testing.T) {
	f := newFixture(t, "sqlite")
	var told []string
	q, err := retry.New(&retry.Config{Store: f.st, Policy: policy(5), Now: f.clock.Now,
		OwnerSync: map[string]func(context.Context, string) error{
			retry.KindResource: func(_ context.Context, uid string) error { told = append(told, uid); return nil },
		}})
	require.NoError(t, err)
	w := f.owner(t, "w")
	w.Conditions = []catalog.Condition{{Type: retry.ConditionDeletionStuck, Status: "True", Reason: "BlockedByReferrer", Message: "written by the collector"}}
	w, err = f.st.Update(f.ctx, w)
	require.NoError(t, err)

	require.NoError(t, q.Succeed(f.ctx, w.Key(), w.UID, nil), "no rows at all")
	require.NoError(t, q.Succeed(f.ctx, w.Key(), w.UID, []catalog.RetryIdentity{failing(w, "").Identity()}), "not this row")
	require.NoError(t, q.Succeed(f.ctx, w.Key(), w.UID, []catalog.RetryIdentity{}), "no ids")
	assert.Empty(t, told)
	cur, err := f.st.GetByUID(f.ctx, w.UID)
	require.NoError(t, err)
	assert.Equal(t, w.ResourceVersion, cur.ResourceVersion, "the resource was not written")

	_, err = q.Record(f.ctx, failing(w, "in use"))
	require.NoError(t, err)
	require.NoError(t, q.Succeed(f.ctx, w.Key(), w.UID, nil))
	assert.Equal(t, []string{w.UID}, told, "the condition's writer is told")
	cur, err = f.st.GetByUID(f.ctx, w.UID)
	require.NoError(t, err)
	assert.Equal(t, w.Conditions[0].Status, condition(cur, retry.ConditionDeletionStuck).Status)
	assert.Equal(t, w.ResourceVersion, cur.ResourceVersion, "the queue wrote the resource itself")
}

// TestFinishOfAnOwnerWithoutRowsAnnouncesNothing: an owner purged without
// ever having waited in the queue gets no event and no notification.
func TestFinishOfAnOwnerWithoutRowsAnnouncesNothing(t *testing.T) {
	f := newFixture(t, "sqlite")
	q := f.queue(t, f.st, policy(1), "https://hooks.example/a")
	w := f.owner(t, "w")
	for _, abandoned := range []bool{false, true} {
		require.NoError(t, q.Finish(f.ctx, w.Key(), w.UID, abandoned))
	}
	outbox, err := f.st.ListNotifications(f.ctx, "", 0)
	require.NoError(t, err)
	assert.Empty(t, outbox)
	audit, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{UID: w.UID})
	require.NoError(t, err)
	for _, e := range audit {
		assert.NotContains(t, e.Action, "retry-", "%+v", e)
	}
}

// TestFinishAnnouncesCompletionOfAnOwnerThatOnceHadADeadLetter: an owner
// whose row was discarded and then requeued by `retry now` is still
// announced as DeletionCompleted when it is purged (it was stuck once);
// the event says how the deletion ended.
func TestFinishAnnouncesCompletionOfAnOwnerThatOnceHadADeadLetter(t *testing.T) {
	f := newFixture(t, "sqlite")
	q := f.queue(t, f.st, policy(1), "https://hooks.example/a")
	requeued, abandoned := f.owner(t, "requeued"), f.owner(t, "abandoned")
	rows, err := q.Record(f.ctx, failing(requeued, "x"), failing(abandoned, "y"))
	require.NoError(t, err)
	require.Equal(t, catalog.RetryDiscarded, rows[0].State)
	back, err := q.RetryNow(f.ctx, rows[0].ID, false)
	require.NoError(t, err)
	require.Equal(t, catalog.RetryRetryable, back.State)
	before, err := f.st.ListNotifications(f.ctx, "", 0)
	require.NoError(t, err)

	require.NoError(t, q.Finish(f.ctx, requeued.Key(), requeued.UID, false))
	require.NoError(t, q.Finish(f.ctx, abandoned.Key(), abandoned.UID, true))
	after, err := f.st.ListNotifications(f.ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, after, len(before)+2)
	got := map[string]retry.Event{}
	for _, n := range after {
		var ev retry.Event
		require.NoError(t, json.Unmarshal(n.Body, &ev))
		if ev.Type != retry.EventDeletionStuck {
			got[ev.Resource.Name] = ev
		}
	}
	assert.Equal(t, retry.EventDeletionCompleted, got["requeued"].Type)
	assert.Equal(t, "the deletion finished after all", got["requeued"].Reason)
	assert.Equal(t, retry.EventAbandoned, got["abandoned"].Type)
	assert.Equal(t, "1 queued items abandoned by the operator", got["abandoned"].Reason)
}

// TestDeletionStuckChangesOnlyWhenItsRowsDo: the queue rewrites a backup
// owner's DeletionStuck only when what it says changes, and its
// lastTransitionTime moves only when its status does (True to False),
// not when only its message does.
func TestDeletionStuckChangesOnlyWhenItsRowsDo(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			p := policy(1)
			p.Plugins = map[string]retry.Backoff{"example.com/slow": {MaxAttempts: 5}}
			q := f.queue(t, f.st, p)
			w := f.owner(t, "w")
			item := func(id, plugin string) retry.Outcome {
				return retry.Outcome{Kind: retry.KindBackupItem, Owner: w.Key(), UID: w.UID, ItemID: id, Plugin: plugin, Result: "failed", Message: "in use"}
			}
			stuck := func() (*catalog.Resource, *catalog.Condition) {
				t.Helper()
				cur, err := f.st.GetByUID(f.ctx, w.UID)
				require.NoError(t, err)
				c := condition(cur, retry.ConditionDeletionStuck)
				require.NotNil(t, c)
				return cur, c
			}

			_, err := q.Record(f.ctx, item("0:a", "example.com/fast"), item("1:b", "example.com/slow"))
			require.NoError(t, err)
			cur, c := stuck()
			require.Equal(t, "True", c.Status)
			since := c.LastTransitionTime
			require.False(t, since.IsZero())

			// The row that is not discarded goes: the condition says the
			// same, and is not written again.
			f.clock.Advance(time.Minute)
			require.NoError(t, q.Succeed(f.ctx, w.Key(), w.UID, []catalog.RetryIdentity{item("1:b", "example.com/slow").Identity()}))
			again, c := stuck()
			assert.Equal(t, cur.ResourceVersion, again.ResourceVersion, "rewritten although nothing changed")

			// A second dead letter: the message changes, the status and
			// its transition time do not.
			f.clock.Advance(time.Minute)
			_, err = q.Record(f.ctx, item("2:c", "example.com/fast"))
			require.NoError(t, err)
			_, c2 := stuck()
			assert.NotEqual(t, c.Message, c2.Message)
			assert.Equal(t, "True", c2.Status)
			assert.True(t, since.Equal(c2.LastTransitionTime), "lastTransitionTime moved without a transition: %v, was %v", c2.LastTransitionTime, since)

			// All settled: False, now.
			f.clock.Advance(time.Minute)
			require.NoError(t, q.Succeed(f.ctx, w.Key(), w.UID, nil))
			_, c3 := stuck()
			assert.Equal(t, "False", c3.Status)
			assert.True(t, f.clock.Now().Equal(c3.LastTransitionTime), "lastTransitionTime %v, want %v", c3.LastTransitionTime, f.clock.Now())
		})
	}
}

// TestDeadLetterMessageSaysWhatIsStuckAndWhatToDo: the DeletionStuck
// message names the item and its plugin (when there is one), the last
// five attempts, how many items are discarded, and offers to abandon only
// a backup (catalog resources have no abandon path).
func TestDeadLetterMessageSaysWhatIsStuckAndWhatToDo(t *testing.T) {
	res := &catalog.Resource{Kind: "VolumeSnapshot", Namespace: "prod", Name: "snap-w"}
	var hist []catalog.RetryAttempt
	for i := range 7 {
		hist = append(hist, catalog.RetryAttempt{Time: epoch.Add(time.Duration(i) * time.Hour), Outcome: fmt.Sprintf("o%d", i)})
	}
	backupItem := &catalog.RetryRow{ID: 7, RetryIdentity: catalog.RetryIdentity{Kind: retry.KindBackupItem, ItemID: "3:pods/ns/a", Plugin: "example.com/ebs"},
		Attempts: 7, LastError: "locked", FirstSeenAt: epoch, History: hist}
	wait := &catalog.RetryRow{ID: 8, RetryIdentity: catalog.RetryIdentity{Kind: retry.KindWait, ItemID: "finalizer:example.com/drain"},
		Attempts: 2, LastError: "waits", FirstSeenAt: epoch, History: hist[:1]}

	reason, msg := retry.DeadLetterReason(res, []*catalog.RetryRow{backupItem})
	assert.Equal(t, retry.ReasonRetriesExhausted, reason)
	assert.True(t, strings.HasPrefix(msg, "item 3:pods/ns/a at plugin example.com/ebs: 7 attempts since "), msg)
	assert.Contains(t, msg, "or abandon the backup")
	assert.Contains(t, msg, "lethe retry now 7")
	assert.NotContains(t, msg, " o1,", "only the last five attempts")
	assert.Contains(t, msg, " o2, ")
	assert.Contains(t, msg, " o6;")

	_, msg = retry.DeadLetterReason(res, []*catalog.RetryRow{wait, backupItem})
	assert.True(t, strings.HasPrefix(msg, "2 items discarded; first: item finalizer:example.com/drain: 2 attempts"), msg)
	assert.NotContains(t, msg, "at plugin")
	assert.NotContains(t, msg, "abandon", "a catalog resource has no abandon path")
}
