package retry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// TestAFailedRunWritesNothingOnARowAnotherCollectorClaimed: a handler
// fails, but while it ran its claim lapsed and another collector claimed
// the row (a new epoch). The superseded run records no attempt and no
// error on the row: it belongs to the other claim now.
func TestAFailedRunWritesNothingOnARowAnotherCollectorClaimed(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			q := f.queue(t, f.st, policy(10))
			w := f.owner(t, "w")
			rows, err := q.Record(f.ctx, retry.Outcome{Kind: "Slow", Owner: w.Key(), UID: w.UID, ItemID: "item", Result: "waiting"})
			require.NoError(t, err)
			before := rows[0]
			var other []*catalog.RetryRow
			col, err := retry.NewCollector(&retry.CollectorConfig{Queue: q, Holder: "server-a", LeaseTTL: time.Minute,
				Handlers: map[string]retry.Handler{"Slow": func(ctx context.Context, _ []*catalog.RetryRow) error {
					// server-a's lease lapses; server-b claims the row.
					f.clock.Advance(2 * time.Minute)
					var err error
					other, err = f.st.ClaimRetries(ctx, "server-b", time.Minute, 10)
					require.NoError(t, err)
					return errors.New("storage unreachable")
				}}})
			require.NoError(t, err)
			f.clock.Advance(time.Hour)
			n, err := col.Tick(f.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Len(t, other, 1, "server-b claimed the row")

			cur, err := q.Get(f.ctx, before.ID)
			require.NoError(t, err)
			require.Equal(t, before.Attempts, cur.Attempts, "the superseded run counted an attempt")
			require.NotEqual(t, "storage unreachable", cur.LastError, "the superseded run wrote its error")
			require.Len(t, cur.History, len(before.History))
			require.Equal(t, other[0].Epoch, cur.Epoch, "the row is still server-b's claim")
		})
	}
}

// TestCollectorConfigNeedsAQueueAndAHolder: a collector without a lease
// holder name is refused (two unnamed collectors would share claims).
func TestCollectorConfigNeedsAQueueAndAHolder(t *testing.T) {
	f := newFixture(t, "sqlite")
	q := f.queue(t, f.st, policy(10))
	_, err := retry.NewCollector(&retry.CollectorConfig{Queue: q})
	require.ErrorContains(t, err, "Holder are required")
	_, err = retry.NewCollector(&retry.CollectorConfig{Holder: "a"})
	require.ErrorContains(t, err, "Queue and Holder are required")
	_, err = retry.NewCollector(&retry.CollectorConfig{Queue: q, Holder: "a"})
	require.NoError(t, err)
}

// TestStuckEventNamesTheItemAndTheRowToInspect: the DeletionStuck event
// of a row about a backup item names that item and the `lethe retry get`
// command for the row; the event of a resource's own row names no item
// (the resource is the item).
func TestStuckEventNamesTheItemAndTheRowToInspect(t *testing.T) {
	f := newFixture(t, "sqlite")
	q := f.queue(t, f.st, policy(2), "http://receiver.invalid/lethe")
	w := f.owner(t, "w")
	v := f.owner(t, "v")
	var item, own []*catalog.RetryRow
	for range 2 { // the second attempt discards both rows
		var err error
		item, err = q.Record(f.ctx, retry.Outcome{Kind: retry.KindBackupItem, Owner: w.Key(), UID: w.UID, ItemID: "3:pods/ns/a",
			Plugin: "example.com/ebs", Result: "failed", Message: "in use"})
		require.NoError(t, err)
		own, err = q.Record(f.ctx, failing(v, "boom"))
		require.NoError(t, err)
	}
	pending, err := f.st.ListNotifications(f.ctx, catalog.NotificationPending, 0)
	require.NoError(t, err)
	events := map[string]retry.Event{}
	for _, n := range pending {
		var ev retry.Event
		require.NoError(t, json.Unmarshal(n.Body, &ev))
		events[ev.Resource.Name] = ev
	}
	require.Len(t, events, 2)
	require.Equal(t, &retry.EventItem{Kind: retry.KindBackupItem, ID: "3:pods/ns/a"}, events["w"].Item)
	require.Equal(t, fmt.Sprintf("lethe retry get %d", item[0].ID), events["w"].Inspect)
	require.Nil(t, events["v"].Item, "a resource's own row names no item")
	require.Equal(t, fmt.Sprintf("lethe retry get %d", own[0].ID), events["v"].Inspect)
}

// TestANotificationClaimOutlastsTwoDeliveryTimeouts: by default a
// notifier's claim on an outbox row lasts twice its delivery timeout plus
// ten seconds, so no other notifier claims (and sends) the row again
// while its request may still be under way.
func TestANotificationClaimOutlastsTwoDeliveryTimeouts(t *testing.T) {
	f := newFixture(t, "sqlite")
	h := newHook(t, "hang")
	q := f.queue(t, f.st, policy(1), h.srv.URL)
	w := f.owner(t, "w")
	_, err := q.Record(f.ctx, failing(w, "boom"))
	require.NoError(t, err)
	const timeout = 300 * time.Millisecond
	n, err := retry.NewNotifier(&retry.NotifierConfig{Store: f.st, Holder: "me", Now: f.clock.Now, Timeout: timeout,
		Webhooks: []retry.Webhook{{URL: h.srv.URL, Secret: secret}}})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = n.DeliverDue(f.ctx)
	}()
	require.Eventually(t, func() bool { return len(h.requests()) == 1 }, 10*time.Second, 5*time.Millisecond)
	pending, err := f.st.ListNotifications(f.ctx, catalog.NotificationPending, 0)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, "me", pending[0].Holder)
	require.Equal(t, f.clock.Now().Add(2*timeout+10*time.Second), pending[0].LeaseExpiresAt.UTC())
	<-done
}

// TestAStoppedCollectorChargesNoAttempt: a collector stopped while its
// handler runs (the handler returns the context's error) records nothing
// on its rows: no attempt, no error. Its claim lapses and another
// collector runs them (DESIGN §6: either can stop at any moment).
func TestAStoppedCollectorChargesNoAttempt(t *testing.T) {
	f := newFixture(t, "sqlite")
	q := f.queue(t, f.st, policy(10))
	w := f.owner(t, "w")
	rows, err := q.Record(f.ctx, retry.Outcome{Kind: "Slow", Owner: w.Key(), UID: w.UID, ItemID: "item", Result: "waiting"})
	require.NoError(t, err)
	before := rows[0]
	ctx, stop := context.WithCancel(f.ctx)
	defer stop()
	col, err := retry.NewCollector(&retry.CollectorConfig{Queue: q, Holder: "server-a", LeaseTTL: time.Minute,
		Handlers: map[string]retry.Handler{"Slow": func(ctx context.Context, _ []*catalog.RetryRow) error {
			stop() // the server shuts down mid-run
			return ctx.Err()
		}}})
	require.NoError(t, err)
	f.clock.Advance(time.Hour)
	_, _ = col.Tick(ctx)

	cur, err := q.Get(f.ctx, before.ID)
	require.NoError(t, err)
	require.Equal(t, before.Attempts, cur.Attempts, "a stop counted as an attempt")
	require.Len(t, cur.History, len(before.History))
	require.NotContains(t, cur.LastError, "canceled")
	f.clock.Advance(2 * time.Minute)
	other, err := f.st.ClaimRetries(f.ctx, "server-b", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, other, 1, "once the stopped collector's claim lapses, another runs the row")
}
