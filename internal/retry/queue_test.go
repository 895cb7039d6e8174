package retry_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

func failing(r *catalog.Resource, msg string) retry.Outcome {
	return retry.Outcome{Kind: retry.KindResource, Owner: r.Key(), UID: r.UID, Plugin: "example.com/ebs", Result: "failed", Message: msg, Duration: time.Second}
}

// TestMaxAttemptsDiscards: each failed attempt moves the next attempt on
// by the policy; the attempt that reaches the maximum discards the row,
// and in that transaction the event (audit entry) and one notification
// per webhook are written; the owner gets DeletionStuck with the reason
// and the history, and stays (nothing is purged). Later attempts leave
// the row discarded and notify nobody again.
func TestMaxAttemptsDiscards(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			p := policy(3)
			p.Default.Jitter = 0
			q := f.queue(t, f.st, p, "https://hooks.example/a", "https://hooks.example/b")
			w := f.owner(t, "w1")

			for n := 1; n <= 2; n++ {
				rows, err := q.Record(f.ctx, failing(w, "snapshot in use"))
				require.NoError(t, err)
				require.Len(t, rows, 1)
				require.Equal(t, catalog.RetryRetryable, rows[0].State)
				require.Equal(t, n, rows[0].Attempts)
				require.Equal(t, f.clock.Now().Add(p.Default.Delay(n)), rows[0].NextAttemptAt, "attempt %d", n)
				f.clock.Advance(p.Default.Delay(n))
			}
			rows, err := q.Record(f.ctx, failing(w, "snapshot still in use"))
			require.NoError(t, err)
			dead := rows[0]
			require.Equal(t, catalog.RetryDiscarded, dead.State)
			require.Equal(t, 3, dead.Attempts)
			require.Len(t, dead.History, 4, "three attempts, then the discard")
			assert.Equal(t, retry.OutcomeDiscarded, dead.History[3].Outcome)
			assert.Equal(t, "snapshot still in use", dead.LastError)
			assert.Equal(t, epoch, dead.FirstSeenAt)

			// The owner stays, with the condition.
			cur, err := f.st.GetByUID(f.ctx, w.UID)
			require.NoError(t, err)
			c := condition(cur, retry.ConditionDeletionStuck)
			require.NotNil(t, c, "%+v", cur.Conditions)
			assert.Equal(t, "True", c.Status)
			assert.Equal(t, "RetriesExhausted", c.Reason)
			assert.Contains(t, c.Message, "snapshot still in use")
			assert.Contains(t, c.Message, "3 attempts")
			assert.Contains(t, c.Message, "history:")

			// The event, and one notification per webhook.
			audit, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{UID: w.UID})
			require.NoError(t, err)
			last := lastAudit(t, audit, retry.ActionDiscarded)
			assert.Equal(t, "tester", last.Actor)
			outbox, err := f.st.ListNotifications(f.ctx, "", 0)
			require.NoError(t, err)
			require.Len(t, outbox, 2)
			var ev retry.Event
			require.NoError(t, json.Unmarshal(outbox[0].Body, &ev))
			assert.Equal(t, retry.EventDeletionStuck, ev.Type)
			assert.Equal(t, outbox[0].EventID, ev.ID)
			assert.Equal(t, outbox[1].EventID, ev.ID, "one event, one idempotency key, for every target")
			assert.Equal(t, retry.EventResource{Kind: "Widget", Name: "w1", UID: w.UID}, ev.Resource)
			assert.Equal(t, "example.com/ebs", ev.Plugin)
			assert.Equal(t, 3, ev.Attempts)
			assert.Equal(t, "snapshot still in use", ev.LastError)
			assert.Equal(t, "lethe explain Widget w1", ev.Explain)

			// Discarded rows are neither due nor claimed; another attempt
			// (a whole-backup run sends it too) notifies nobody again.
			_, ok, err := f.st.NextRetryDue(f.ctx)
			require.NoError(t, err)
			assert.False(t, ok)
			f.clock.Advance(48 * time.Hour)
			claimed, err := f.st.ClaimRetries(f.ctx, "h", time.Minute, 10)
			require.NoError(t, err)
			assert.Empty(t, claimed)
			rows, err = q.Record(f.ctx, failing(w, "again"))
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryDiscarded, rows[0].State)
			outbox, err = f.st.ListNotifications(f.ctx, "", 0)
			require.NoError(t, err)
			assert.Len(t, outbox, 2)

			// Success removes the row and clears the condition.
			require.NoError(t, q.Succeed(f.ctx, w.Key(), w.UID, nil))
			cur, err = f.st.GetByUID(f.ctx, w.UID)
			require.NoError(t, err)
			assert.Equal(t, "False", condition(cur, retry.ConditionDeletionStuck).Status)
			left, err := q.List(f.ctx, catalog.RetryFilter{})
			require.NoError(t, err)
			assert.Empty(t, left)
		})
	}
}

// TestRetryAfterRespected: a plugin's retryAfter later than the backoff
// sets the next attempt; per-plugin schedules apply.
func TestRetryAfterRespected(t *testing.T) {
	f := newFixture(t, "sqlite")
	p, err := retry.ParsePolicy([]string{"10s", "example.com/slow=10m"}, []string{"example.com/slow=2"})
	require.NoError(t, err)
	q := f.queue(t, f.st, p)
	w := f.owner(t, "w")
	o := failing(w, "locked")
	o.Result, o.RetryAfter = "blocked", 6*time.Hour
	rows, err := q.Record(f.ctx, o)
	require.NoError(t, err)
	assert.Equal(t, epoch.Add(6*time.Hour), rows[0].NextAttemptAt, "never earlier than retryAfter")
	claimed, err := f.st.ClaimRetries(f.ctx, "h", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, claimed, "not due before the plugin's retryAfter")

	slow := retry.Outcome{Kind: retry.KindBackupItem, Owner: w.Key(), UID: w.UID, ItemID: "0:pods/ns/a", Plugin: "example.com/slow", Result: "failed"}
	rows, err = q.Record(f.ctx, slow)
	require.NoError(t, err)
	d := rows[0].NextAttemptAt.Sub(epoch)
	assert.True(t, d >= 9*time.Minute && d <= 11*time.Minute, "the plugin's own base: %s", d)
	rows, err = q.Record(f.ctx, slow)
	require.NoError(t, err)
	assert.Equal(t, catalog.RetryDiscarded, rows[0].State, "the plugin's own maximum")
}

// TestOperatorRetryNowAndDiscard: `retry now` requeues a discarded row
// with its attempts from zero and clears DeletionStuck; `retry discard`
// discards by hand with the same event; both are audited in the actor's
// name, and their dry runs change nothing.
func TestOperatorRetryNowAndDiscard(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			q := f.queue(t, f.st, policy(1), "https://hooks.example/a")
			w := f.owner(t, "w")
			rows, err := q.Record(f.ctx, failing(w, "boom"))
			require.NoError(t, err)
			id := rows[0].ID
			require.Equal(t, catalog.RetryDiscarded, rows[0].State)

			alice := catalog.WithActor(f.ctx, "cli:alice")
			dry, err := q.RetryNow(alice, id, true)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryRetryable, dry.State)
			assert.Equal(t, 0, dry.Attempts)
			unchanged, err := q.Get(f.ctx, id)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryDiscarded, unchanged.State, "a dry run writes nothing")

			f.clock.Advance(time.Hour)
			back, err := q.RetryNow(alice, id, false)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryRetryable, back.State)
			assert.Equal(t, 0, back.Attempts)
			assert.Equal(t, f.clock.Now(), back.NextAttemptAt)
			assert.Equal(t, "requeued", back.History[len(back.History)-1].Outcome)
			cur, err := f.st.GetByUID(f.ctx, w.UID)
			require.NoError(t, err)
			assert.Equal(t, "False", condition(cur, retry.ConditionDeletionStuck).Status)
			audit, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{UID: w.UID})
			require.NoError(t, err)
			last := lastAudit(t, audit, retry.ActionRetryNow)
			assert.Equal(t, "cli:alice", last.Actor)
			due, ok, err := f.st.NextRetryDue(f.ctx)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, f.clock.Now(), due)

			_, err = q.Discard(alice, id, true)
			require.NoError(t, err)
			still, err := q.Get(f.ctx, id)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryRetryable, still.State)
			gone, err := q.Discard(catalog.WithActor(f.ctx, "cli:bob"), id, false)
			require.NoError(t, err)
			assert.Equal(t, catalog.RetryDiscarded, gone.State)
			cur, err = f.st.GetByUID(f.ctx, w.UID)
			require.NoError(t, err)
			c := condition(cur, retry.ConditionDeletionStuck)
			assert.Equal(t, "True", c.Status)
			assert.Equal(t, "Discarded", c.Reason)
			audit, err = f.st.ListAudit(f.ctx, catalog.AuditFilter{UID: w.UID})
			require.NoError(t, err)
			last = lastAudit(t, audit, retry.ActionDiscard)
			assert.Equal(t, "cli:bob", last.Actor)
			outbox, err := f.st.ListNotifications(f.ctx, "", 0)
			require.NoError(t, err)
			assert.Len(t, outbox, 2, "exhausted once, discarded once")
			_, err = q.Discard(f.ctx, id, false)
			require.ErrorContains(t, err, "already discarded")
			_, err = q.RetryNow(f.ctx, 987654, false)
			require.ErrorIs(t, err, catalog.ErrNotFound)
		})
	}
}

// TestFinishAnnouncesAbandonAndCompletion: a purged owner's rows go; an
// abandoned one gets the Abandoned event, one that had been stuck and
// finished gets DeletionCompleted.
func TestFinishAnnouncesAbandonAndCompletion(t *testing.T) {
	f := newFixture(t, "sqlite")
	q := f.queue(t, f.st, policy(1), "https://hooks.example/a")
	a, b, c := f.owner(t, "a"), f.owner(t, "b"), f.owner(t, "c")
	_, err := q.Record(f.ctx, failing(a, "x"), failing(b, "y"))
	require.NoError(t, err)
	q2 := f.queue(t, f.st, policy(5), "https://hooks.example/a")
	_, err = q2.Record(f.ctx, failing(c, "z"))
	require.NoError(t, err)
	before, err := f.st.ListNotifications(f.ctx, "", 0)
	require.NoError(t, err)
	require.NoError(t, q.Finish(f.ctx, a.Key(), a.UID, true))
	require.NoError(t, q.Finish(f.ctx, b.Key(), b.UID, false))
	require.NoError(t, q.Finish(f.ctx, c.Key(), c.UID, false))
	after, err := f.st.ListNotifications(f.ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, after, len(before)+2, "c was never stuck: no event")
	types := []string{after[0].EventType, after[1].EventType}
	assert.ElementsMatch(t, []string{retry.EventAbandoned, retry.EventDeletionCompleted}, types)
	left, err := q.List(f.ctx, catalog.RetryFilter{})
	require.NoError(t, err)
	assert.Empty(t, left)
}

// lastAudit is the newest entry with the action (the condition's own
// "update" entry may follow it).
func lastAudit(t *testing.T, entries []catalog.AuditEntry, action string) catalog.AuditEntry {
	t.Helper()
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Action == action {
			return entries[i]
		}
	}
	t.Fatalf("no %s entry in %+v", action, entries)
	return catalog.AuditEntry{}
}

// TestWaitIsNeverAnAttempt is issue 24.1: a row that waits on something
// outside any plugin (a deletion's storage location) is recorded with
// Wait: its attempts stay zero however often it is looked at, so it is
// never discarded, and each look puts the next one off on the backoff.
func TestWaitIsNeverAnAttempt(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			p := policy(2)
			p.Default.Jitter = 0
			q := f.queue(t, f.st, p)
			w := f.owner(t, "w1")
			o := retry.Outcome{Kind: retry.KindLocation, Owner: w.Key(), UID: w.UID, ItemID: "location:far", Result: retry.OutcomeWaiting,
				Message: "LocationUnavailable: storage location file:///far is unavailable"}
			for n := 1; n <= 4; n++ {
				row, err := q.Wait(f.ctx, o)
				require.NoError(t, err)
				require.Equal(t, catalog.RetryRetryable, row.State, "look %d", n)
				require.Zero(t, row.Attempts, "look %d", n)
				require.Equal(t, o.Message, row.LastError)
				require.Equal(t, f.clock.Now().Add(p.Default.Delay(n)), row.NextAttemptAt, "look %d", n)
				f.clock.Advance(p.Default.Delay(n))
			}
			cur, err := f.st.GetByUID(f.ctx, w.UID)
			require.NoError(t, err)
			require.Nil(t, condition(cur, retry.ConditionDeletionStuck), "never stuck")
		})
	}
}
