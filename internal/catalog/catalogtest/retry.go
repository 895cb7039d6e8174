package catalogtest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

func retryID(item, plugin string) catalog.RetryIdentity {
	return catalog.RetryIdentity{Kind: "BackupItem", Key: "Backup/b1", ItemID: item, Plugin: plugin}
}

// backoffPlan keeps the row retryable an hour after now.
func retryIn(f *fixture, d time.Duration) func(*catalog.RetryRow) catalog.RetryPlan {
	return func(*catalog.RetryRow) catalog.RetryPlan {
		return catalog.RetryPlan{State: catalog.RetryRetryable, NextAttemptAt: f.clock.Now().Add(d)}
	}
}

func testRetryQueue(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	_, ok, err := f.s.NextRetryDue(f.ctx)
	require.NoError(t, err)
	assert.False(t, ok, "an empty queue has nothing due")

	// Recording creates the row with its first attempt.
	rows, err := f.s.RecordRetries(f.ctx, []catalog.RetryRecord{
		{RetryIdentity: retryID("1:a", "p/x"), OwnerUID: "u1", Attempt: catalog.RetryAttempt{Outcome: "blocked", Message: "locked", Duration: time.Second}},
		{RetryIdentity: retryID("2:b", "p/x"), OwnerUID: "u1", Attempt: catalog.RetryAttempt{Outcome: "failed", Message: "boom"}},
	}, retryIn(f, time.Hour))
	require.NoError(t, err)
	require.Len(t, rows, 2)
	r1 := rows[0]
	assert.NotZero(t, r1.ID)
	assert.Equal(t, catalog.RetryRetryable, r1.State)
	assert.Equal(t, 1, r1.Attempts)
	assert.Equal(t, "locked", r1.LastError)
	assert.True(t, r1.FirstSeenAt.Equal(Epoch))
	assert.True(t, r1.NextAttemptAt.Equal(Epoch.Add(time.Hour)))
	require.Len(t, r1.History, 1)
	assert.Equal(t, catalog.RetryAttempt{Time: Epoch, Outcome: "blocked", Message: "locked", Duration: time.Second}, r1.History[0])

	got, err := f.s.GetRetry(f.ctx, r1.ID)
	require.NoError(t, err)
	assert.Equal(t, r1, got, "Get returns what Record wrote")
	_, err = f.s.GetRetry(f.ctx, 99999)
	require.ErrorIs(t, err, catalog.ErrNotFound)

	// A second attempt for the same identity updates the same row; decide
	// sees the row before its state changes, with the attempt counted.
	f.clock.Advance(time.Minute)
	var seen catalog.RetryRow
	rows, err = f.s.RecordRetries(f.ctx, []catalog.RetryRecord{
		{RetryIdentity: retryID("1:a", "p/x"), Attempt: catalog.RetryAttempt{Outcome: "blocked", Message: "still locked"}},
	}, func(r *catalog.RetryRow) catalog.RetryPlan {
		seen = *r
		return catalog.RetryPlan{State: catalog.RetryRetryable, NextAttemptAt: f.clock.Now().Add(2 * time.Hour)}
	})
	require.NoError(t, err)
	assert.Equal(t, r1.ID, rows[0].ID)
	assert.Equal(t, 2, seen.Attempts)
	assert.Equal(t, catalog.RetryRetryable, seen.State)
	assert.Equal(t, "u1", rows[0].OwnerUID, "the owner is kept")
	assert.Len(t, rows[0].History, 2)
	assert.True(t, rows[0].FirstSeenAt.Equal(Epoch), "first seen does not move")

	// The next-due time comes from the index: row 2, an hour after Epoch.
	due, ok, err := f.s.NextRetryDue(f.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, due.Equal(Epoch.Add(time.Hour)), "next due %s", due)

	// Nothing is claimable before it is due.
	claimed, err := f.s.ClaimRetries(f.ctx, "h1", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, claimed)
	f.clock.Advance(time.Hour)
	claimed, err = f.s.ClaimRetries(f.ctx, "h1", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c := claimed[0]
	assert.Equal(t, "2:b", c.ItemID)
	assert.Equal(t, catalog.RetryRunning, c.State)
	assert.Equal(t, "h1", c.Holder)
	assert.Equal(t, 1, c.Attempts, "a claim is not an attempt")
	// A lease that expires makes the row claimable again, by another holder.
	again, err := f.s.ClaimRetries(f.ctx, "h2", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, again, "a live lease is not claimed twice")
	f.clock.Advance(2 * time.Minute)
	again, err = f.s.ClaimRetries(f.ctx, "h2", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, again, 1)
	assert.Equal(t, c.ID, again[0].ID)
	assert.Equal(t, c.Epoch+1, again[0].Epoch)

	// The older claim is fenced off.
	_, err = f.s.UpdateRetry(f.ctx, c.ID, c.Epoch, func(*catalog.RetryRow) (catalog.RetryPlan, error) {
		return catalog.RetryPlan{State: catalog.RetryRetryable}, nil
	})
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	// Recording an attempt ends the live lease and discards with an audit
	// entry and a notification, in one transaction.
	rows, err = f.s.RecordRetries(f.ctx, []catalog.RetryRecord{
		{RetryIdentity: retryID("2:b", "p/x"), Attempt: catalog.RetryAttempt{Outcome: "failed", Message: "boom again"}},
	}, func(r *catalog.RetryRow) catalog.RetryPlan {
		return catalog.RetryPlan{State: catalog.RetryDiscarded,
			Audit: []catalog.AuditEntry{{Action: "retry-discarded", Kind: "Backup", Name: "b1", UID: "u1", Reason: "exhausted"}},
			Notifications: []catalog.Notification{
				{EventID: "ev-1", EventType: "DeletionStuck", Target: "http://a.example/hook", Body: json.RawMessage(`{"n":1}`)},
				{EventID: "ev-1", EventType: "DeletionStuck", Target: "http://b.example/hook", Body: json.RawMessage(`{"n":1}`)},
			}}
	})
	require.NoError(t, err)
	d := rows[0]
	assert.Equal(t, catalog.RetryDiscarded, d.State)
	assert.Empty(t, d.Holder)
	assert.Equal(t, 2, d.Attempts)
	_, err = f.s.UpdateRetry(f.ctx, d.ID, again[0].Epoch, func(*catalog.RetryRow) (catalog.RetryPlan, error) {
		return catalog.RetryPlan{State: catalog.RetryRetryable}, nil
	})
	require.ErrorIs(t, err, catalog.ErrLeaseLost, "a recorded attempt ends the claim")
	audit, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: "u1"})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	assert.Equal(t, "tester", audit[0].Actor, "the actor comes from the context")
	outbox, err := f.s.ListNotifications(f.ctx, "", 0)
	require.NoError(t, err)
	assert.Len(t, outbox, 2)

	// A discarded row is never claimed, nor due.
	f.clock.Advance(48 * time.Hour)
	claimed, err = f.s.ClaimRetries(f.ctx, "h3", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	assert.Equal(t, r1.ID, claimed[0].ID)

	// A plan that fails writes nothing: neither row, audit nor outbox.
	_, err = f.s.RecordRetries(f.ctx, []catalog.RetryRecord{{RetryIdentity: retryID("1:a", "p/x")}},
		func(*catalog.RetryRow) catalog.RetryPlan {
			return catalog.RetryPlan{State: catalog.RetryDiscarded, Notifications: []catalog.Notification{{EventID: "x"}}}
		})
	require.ErrorIs(t, err, catalog.ErrInvalid)
	cur, err := f.s.GetRetry(f.ctx, r1.ID)
	require.NoError(t, err)
	assert.Equal(t, catalog.RetryRunning, cur.State)
	assert.Equal(t, 2, cur.Attempts)

	// An operator requeue: attempts reset, a note in the history.
	back, err := f.s.UpdateRetry(f.ctx, d.ID, 0, func(r *catalog.RetryRow) (catalog.RetryPlan, error) {
		return catalog.RetryPlan{State: catalog.RetryRetryable, NextAttemptAt: f.clock.Now(), ResetAttempts: true,
			Note:  &catalog.RetryAttempt{Time: f.clock.Now(), Outcome: "requeued", Message: "by tester"},
			Audit: []catalog.AuditEntry{{Action: "retry-now", Kind: "Backup", Name: "b1", UID: "u1"}}}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, 0, back.Attempts)
	assert.Equal(t, "requeued", back.History[len(back.History)-1].Outcome)
	_, err = f.s.UpdateRetry(f.ctx, 4242, 0, func(*catalog.RetryRow) (catalog.RetryPlan, error) { return catalog.RetryPlan{}, nil })
	require.ErrorIs(t, err, catalog.ErrNotFound)

	counts, err := f.s.CountRetries(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, map[catalog.RetryState]int64{catalog.RetryRetryable: 1, catalog.RetryRunning: 1}, counts)

	list, err := f.s.ListRetries(f.ctx, catalog.RetryFilter{State: catalog.RetryRunning})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, r1.ID, list[0].ID)
	list, err = f.s.ListRetries(f.ctx, catalog.RetryFilter{Key: "Backup/b1", OwnerUID: "u1"})
	require.NoError(t, err)
	assert.Len(t, list, 2)
	_, err = f.s.ListRetries(f.ctx, catalog.RetryFilter{State: "bogus"})
	require.ErrorIs(t, err, catalog.ErrInvalid)

	// History keeps the newest RetryHistoryMax attempts.
	for i := range catalog.RetryHistoryMax + 5 {
		_, err = f.s.RecordRetries(f.ctx, []catalog.RetryRecord{{RetryIdentity: retryID("3:c", ""), Attempt: catalog.RetryAttempt{Outcome: "waiting", Message: fmt.Sprint(i)}}},
			retryIn(f, time.Hour))
		require.NoError(t, err)
	}
	l3, err := f.s.ListRetries(f.ctx, catalog.RetryFilter{Key: "Backup/b1", Kind: "BackupItem"})
	require.NoError(t, err)
	var h []catalog.RetryAttempt
	for _, r := range l3 {
		if r.ItemID == "3:c" {
			h = r.History
			assert.Equal(t, catalog.RetryHistoryMax+5, r.Attempts)
		}
	}
	require.Len(t, h, catalog.RetryHistoryMax)
	assert.Equal(t, fmt.Sprint(catalog.RetryHistoryMax+4), h[len(h)-1].Message)

	// Delete by identity, then every row of a key.
	n, err := f.s.DeleteRetries(f.ctx, "Backup/b1", []catalog.RetryIdentity{retryID("3:c", "")})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	n, err = f.s.DeleteRetries(f.ctx, "Backup/b1", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	_, ok, err = f.s.NextRetryDue(f.ctx)
	require.NoError(t, err)
	assert.False(t, ok)

	_, err = f.s.RecordRetries(f.ctx, []catalog.RetryRecord{{}}, retryIn(f, 0))
	require.ErrorIs(t, err, catalog.ErrInvalid)
	_, err = f.s.ClaimRetries(f.ctx, "", time.Minute, 1)
	require.ErrorIs(t, err, catalog.ErrInvalid)
}

// testConcurrentRetryClaims: concurrent claimers never take one row twice
// (FOR UPDATE SKIP LOCKED on PostgreSQL, the single writer on SQLite).
func testConcurrentRetryClaims(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const n = 60
	recs := make([]catalog.RetryRecord, n)
	for i := range recs {
		recs[i] = catalog.RetryRecord{RetryIdentity: retryID(fmt.Sprintf("%03d", i), "p/x")}
	}
	_, err := f.s.RecordRetries(f.ctx, recs, retryIn(f, 0))
	require.NoError(t, err)
	var mu sync.Mutex
	claims := map[int64]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 6 {
		wg.Go(func() {
			holder := fmt.Sprintf("w%d", w)
			for {
				got, err := f.s.ClaimRetries(f.ctx, holder, time.Hour, 3)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					if prev, dup := claims[r.ID]; dup {
						errs <- fmt.Errorf("row %d claimed by %s and %s", r.ID, prev, holder)
					}
					claims[r.ID] = holder
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Len(t, claims, n)
}

func testOutbox(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	_, ok, err := f.s.NextNotificationDue(f.ctx)
	require.NoError(t, err)
	assert.False(t, ok)
	_, err = f.s.RecordRetries(f.ctx, []catalog.RetryRecord{{RetryIdentity: retryID("1:a", "p/x")}}, func(*catalog.RetryRow) catalog.RetryPlan {
		return catalog.RetryPlan{State: catalog.RetryDiscarded, Notifications: []catalog.Notification{
			{EventID: "ev-1", EventType: "DeletionStuck", Target: "t1", Body: json.RawMessage(`{"a":1}`)},
		}}
	})
	require.NoError(t, err)
	due, ok, err := f.s.NextNotificationDue(f.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, due.Equal(Epoch))

	got, err := f.s.ClaimNotifications(f.ctx, "h1", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	n := got[0]
	assert.Equal(t, "ev-1", n.EventID)
	assert.JSONEq(t, `{"a":1}`, string(n.Body))
	assert.Equal(t, 1, n.Attempts)
	none, err := f.s.ClaimNotifications(f.ctx, "h2", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, none, "a leased notification is not claimed twice")

	// A failed delivery is put off; the lease is gone.
	require.NoError(t, f.s.FinishNotification(f.ctx, n.ID, n.Epoch, catalog.NotificationPending, Epoch.Add(time.Minute), "500"))
	require.ErrorIs(t, f.s.FinishNotification(f.ctx, n.ID, n.Epoch, catalog.NotificationDelivered, time.Time{}, ""), catalog.ErrLeaseLost,
		"finishing needs the current claim")
	due, _, err = f.s.NextNotificationDue(f.ctx)
	require.NoError(t, err)
	assert.True(t, due.Equal(Epoch.Add(time.Minute)))
	f.clock.Advance(time.Minute)
	got, err = f.s.ClaimNotifications(f.ctx, "h2", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, 2, got[0].Attempts)
	assert.Equal(t, "500", got[0].LastError)
	// An expired lease is taken over (the holder crashed mid-delivery).
	f.clock.Advance(2 * time.Minute)
	taken, err := f.s.ClaimNotifications(f.ctx, "h3", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, taken, 1)
	require.ErrorIs(t, f.s.FinishNotification(f.ctx, got[0].ID, got[0].Epoch, catalog.NotificationDelivered, time.Time{}, ""), catalog.ErrLeaseLost)
	require.NoError(t, f.s.FinishNotification(f.ctx, taken[0].ID, taken[0].Epoch, catalog.NotificationDelivered, time.Time{}, ""))
	_, ok, err = f.s.NextNotificationDue(f.ctx)
	require.NoError(t, err)
	assert.False(t, ok, "a delivered notification is not due again")
	list, err := f.s.ListNotifications(f.ctx, catalog.NotificationDelivered, 0)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.True(t, list[0].DeliveredAt.Equal(f.clock.Now()))
	require.ErrorIs(t, f.s.FinishNotification(f.ctx, n.ID, n.Epoch, "bogus", time.Time{}, ""), catalog.ErrInvalid)
}
