package gc_test

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/retry"
)

var retryEpoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// retryFixture is a collector whose plugin outcomes and waits go to the
// retry queue, with the queue's collector (what `lethe server` runs),
// everything on one injected clock (the catalog's too).
type retryFixture struct {
	*fixture
	clock *catalogtest.Clock
	q     *retry.Queue
	rc    *retry.Collector
	hooks []string
}

const testSecret = "gc-retry-secret-of-24-bytes-or-more"

func newRetryFixture(t *testing.T, st catalog.Store, clock *catalogtest.Clock, maxAttempts int, webhooks ...string) *retryFixture {
	t.Helper()
	f := &retryFixture{fixture: &fixture{t: t, ctx: catalog.WithActor(context.Background(), "test"), st: st, skew: new(atomic.Int64)}, clock: clock}
	b := retry.DefaultBackoff()
	b.MaxAttempts = maxAttempts
	wake := gc.WakeOnRetryChange(st, "retry-test", clock.Now)
	q, err := retry.New(&retry.Config{Store: st, Policy: retry.Policy{Default: b}, Webhooks: webhooks, Now: clock.Now,
		Rand: rand.New(rand.NewPCG(1, 2)), OwnerSync: map[string]func(context.Context, string) error{retry.KindResource: wake, retry.KindWait: wake}})
	require.NoError(t, err)
	f.q, f.hooks = q, webhooks
	// Recheck is a day: a plugin retry must come from the queue, never
	// from the collector's own timer.
	c, err := gc.New(gc.Config{Store: st, Plugins: f.plugins(), Now: clock.Now, Retry: q, Holder: "gc-test",
		Recheck: 24 * time.Hour, LeaseTTL: 5 * time.Second, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	f.c = c
	f.rc, err = retry.NewCollector(&retry.CollectorConfig{Queue: q, Holder: "retry-test",
		Handlers: map[string]retry.Handler{retry.KindResource: c.RetryHandler(), retry.KindWait: c.RetryHandler()}})
	require.NoError(t, err)
	return f
}

func (f *retryFixture) rows(r *catalog.Resource) []*catalog.RetryRow {
	f.t.Helper()
	rows, err := f.q.List(f.ctx, catalog.RetryFilter{OwnerUID: r.UID})
	require.NoError(f.t, err)
	return rows
}

func (f *retryFixture) tick() int {
	f.t.Helper()
	n, err := f.rc.Tick(f.ctx)
	require.NoError(f.t, err)
	return n
}

func (f *retryFixture) count(line string) int {
	n := 0
	for _, l := range f.recorded() {
		if l == line {
			n++
		}
	}
	return n
}

// TestResourcePluginBlockedThenDone: a plugin that blocks a resource with
// a retryAfter is a KindResource row of the queue, whose next attempt is
// the retryAfter (never sooner: neither the queue's collector nor the
// garbage collector runs the plugin before); the collector does not
// schedule the retry itself. When the row is due, the queue's collector
// steps the resource, the plugin is done, the row goes and the resource
// is purged.
func TestResourcePluginBlockedThenDone(t *testing.T) {
	clock := catalogtest.NewClock(retryEpoch)
	onDriversAt(t, clock.Now, func(t *testing.T, st catalog.Store) {
		f := newRetryFixture(t, st, clock, 10)
		w := f.res("Widget", "w")
		require.NoError(t, os.WriteFile(filepath.Join(f.locks, "w.lock"), []byte("1h"), 0o600))
		require.Equal(t, gc.OutcomeStuck, f.del(w, gc.Foreground))

		rows := f.rows(w)
		require.Len(t, rows, 1)
		row := rows[0]
		require.Equal(t, retry.KindResource, row.Kind)
		require.Equal(t, "Widget/prod/w", row.Key)
		require.Equal(t, "test.lethe.io/a-first", row.Plugin)
		require.Equal(t, catalog.RetryRetryable, row.State)
		require.Equal(t, 1, row.Attempts)
		require.Equal(t, clock.Now().Add(time.Hour), row.NextAttemptAt, "the plugin's retryAfter (1h) is over the backoff (30s)")
		require.Equal(t, "blocked", row.History[0].Outcome)
		x := f.requirePhase(w, catalog.PhaseDeleting)
		cond := stuck(x)
		require.NotNil(t, cond)
		require.Equal(t, "PluginUnfinished", cond.Reason)
		require.Contains(t, cond.Message, "plugin test.lethe.io/a-first blocked")
		require.Contains(t, cond.Message, "lethe retry get")
		wi, err := st.GetWork(f.ctx, gc.Queue, w.UID)
		require.NoError(t, err)
		require.Equal(t, clock.Now().Add(24*time.Hour), wi.RunAt, "the collector parks it; the queue wakes it")

		// Not before the retryAfter: nobody runs the plugin.
		clock.Advance(59 * time.Minute)
		require.Zero(t, f.tick())
		require.Equal(t, gc.OutcomeStuck, f.drive(w))
		require.Equal(t, 1, f.rows(w)[0].Attempts, "the plugin did not run again")
		require.Len(t, f.rows(w)[0].History, 1)

		// Due: the queue's collector steps it; the plugin is done.
		require.NoError(t, os.Remove(filepath.Join(f.locks, "w.lock")))
		clock.Advance(2 * time.Minute)
		require.Equal(t, 1, f.tick())
		f.requirePurged(w)
		require.Equal(t, 1, f.count("test.lethe.io/a-first|widgets/prod/w"))
		require.Equal(t, 1, f.count("test.lethe.io/b-second|widgets/prod/w"))
		require.Empty(t, f.rows(w))
	})
}

// hookServer is a real HTTP receiver of notifications.
type hookServer struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
}

func newHookServer(t *testing.T) *hookServer {
	h := &hookServer{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies, h.heads = append(h.bodies, b), append(h.heads, r.Header.Clone())
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

// events returns the notifications received, their signatures checked.
func (h *hookServer) events(t *testing.T) []retry.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []retry.Event
	for i, b := range h.bodies {
		hd := h.heads[i]
		ts, err := strconv.ParseInt(hd.Get(retry.HeaderWebhookTimestamp), 10, 64)
		require.NoError(t, err)
		require.NoError(t, retry.VerifyWebhook([]byte(testSecret), hd.Get(retry.HeaderWebhookID), hd.Get(retry.HeaderWebhookTimestamp),
			hd.Get(retry.HeaderWebhookSignature), b, time.Unix(ts, 0), time.Minute), "signature of %s", b)
		var ev retry.Event
		require.NoError(t, json.Unmarshal(b, &ev))
		out = append(out, ev)
	}
	return out
}

func (f *retryFixture) deliver(st catalog.Store) {
	f.t.Helper()
	var hooks []retry.Webhook
	for _, u := range f.hooks {
		hooks = append(hooks, retry.Webhook{URL: u, Secret: []byte(testSecret)})
	}
	n, err := retry.NewNotifier(&retry.NotifierConfig{Store: st, Webhooks: hooks, Holder: "notify-test", Now: f.clock.Now,
		Timeout: 5 * time.Second, LeaseTTL: time.Minute})
	require.NoError(f.t, err)
	_, err = n.DeliverDue(f.ctx)
	require.NoError(f.t, err)
}

// TestResourcePluginDeadLetter: a plugin that always fails on a resource
// exhausts --retry-max-attempts: the row is discarded, the resource gets
// DeletionStuck (RetriesExhausted, with the history) from the collector,
// an event is audited and exactly one signed webhook goes out, and
// nothing is purged or tried again. `retry now` (the cause fixed)
// requeues it: the queue's collector runs it, the resource is purged,
// and DeletionCompleted is sent.
func TestResourcePluginDeadLetter(t *testing.T) {
	clock := catalogtest.NewClock(retryEpoch)
	onDriversAt(t, clock.Now, func(t *testing.T, st catalog.Store) {
		hook := newHookServer(t)
		f := newRetryFixture(t, st, clock, 2, hook.URL)
		w := f.res("Widget", "w")
		require.NoError(t, os.WriteFile(filepath.Join(f.locks, "w.fail"), nil, 0o600))
		require.Equal(t, gc.OutcomeStuck, f.del(w, gc.Foreground))
		rows := f.rows(w)
		require.Len(t, rows, 1)
		require.Equal(t, 1, rows[0].Attempts)
		require.True(t, rows[0].NextAttemptAt.After(clock.Now()))

		clock.Advance(time.Hour)
		require.Equal(t, 1, f.tick())
		rows = f.rows(w)
		require.Len(t, rows, 1)
		row := rows[0]
		require.Equal(t, catalog.RetryDiscarded, row.State)
		require.Equal(t, 2, row.Attempts)
		x := f.requirePhase(w, catalog.PhaseDeleting)
		require.Contains(t, x.Finalizers, catalog.FinalizerDeleteActions, "nothing purged")
		cond := stuck(x)
		require.NotNil(t, cond)
		require.Equal(t, retry.ReasonRetriesExhausted, cond.Reason)
		require.Contains(t, cond.Message, "at plugin test.lethe.io/a-first: 2 attempts")
		require.Contains(t, cond.Message, "injected failure for w")
		require.Contains(t, cond.Message, "history:")
		audit, err := st.ListAudit(f.ctx, catalog.AuditFilter{UID: w.UID})
		require.NoError(t, err)
		require.True(t, hasAction(audit, retry.ActionDiscarded))

		// A dead letter is never tried again by itself.
		clock.Advance(72 * time.Hour)
		require.Zero(t, f.tick())
		require.Equal(t, gc.OutcomeStuck, f.drive(w))
		rows = f.rows(w)
		require.Equal(t, 2, rows[0].Attempts, "never tried again")
		require.Len(t, rows[0].History, 3, "failed, failed, discarded")
		e, err := f.c.Explain(f.ctx, w.Key())
		require.NoError(t, err)
		require.Len(t, e.Retries, 1)
		require.Equal(t, catalog.RetryDiscarded, e.Retries[0].State)
		require.Contains(t, e.Reason, "discarded (a dead letter)")

		f.deliver(st)
		evs := hook.events(t)
		require.Len(t, evs, 1, "exactly one webhook")
		require.Equal(t, retry.EventDeletionStuck, evs[0].Type)
		require.Equal(t, "w", evs[0].Resource.Name)
		require.Equal(t, "test.lethe.io/a-first", evs[0].Plugin)
		require.Equal(t, 2, evs[0].Attempts)

		// The cause is fixed; an operator requeues the row. Explain shows
		// the requeued row at once.
		require.NoError(t, os.Remove(filepath.Join(f.locks, "w.fail")))
		_, err = f.q.RetryNow(f.ctx, row.ID, false)
		require.NoError(t, err)
		e, err = f.c.Explain(f.ctx, w.Key())
		require.NoError(t, err)
		require.Equal(t, catalog.RetryRetryable, e.Retries[0].State)
		require.Zero(t, e.Retries[0].Attempts)
		require.Equal(t, 1, f.tick())
		f.requirePurged(w)
		require.Equal(t, 1, f.count("test.lethe.io/a-first|widgets/prod/w"))
		require.Empty(t, f.rows(w))
		f.deliver(st)
		evs = hook.events(t)
		require.Len(t, evs, 2)
		require.Equal(t, retry.EventDeletionCompleted, evs[1].Type)
	})
}

func hasAction(es []catalog.AuditEntry, action string) bool {
	for _, e := range es {
		if e.Action == action {
			return true
		}
	}
	return false
}

// TestWaitsAreRows: a resource held by an Active block referrer and by a
// user finalizer has a KindWait row for each (what `lethe retry list`
// shows, with the next check and the attempts). Each due check is an
// attempt; after the maximum the rows are dead letters (DeletionStuck
// RetriesExhausted, with the chain) and nothing is purged. `retry
// discard` of a row is written on the condition by the collector. When
// the waits go, their rows go, and the cascade finishes.
func TestWaitsAreRows(t *testing.T) {
	clock := catalogtest.NewClock(retryEpoch)
	onDriversAt(t, clock.Now, func(t *testing.T, st catalog.Store) {
		f := newRetryFixture(t, st, clock, 3)
		app := f.res("App", "a")
		data := f.res("Volume", "data", ownedBy(app, true), finalizer("example.com/drain"))
		restore := f.res("Restore", "r", refTo(data, catalog.RefBlock))
		require.Equal(t, gc.OutcomeStuck, f.del(app, gc.Foreground))

		rows := f.rows(data)
		require.Len(t, rows, 2)
		ids := []string{rows[0].ItemID, rows[1].ItemID}
		require.ElementsMatch(t, []string{"reference:Restore/prod/r", "finalizer:example.com/drain"}, ids)
		for _, r := range rows {
			require.Equal(t, retry.KindWait, r.Kind)
			require.Empty(t, r.Plugin)
			require.Equal(t, 1, r.Attempts)
			require.Equal(t, "waiting", r.History[0].Outcome)
			require.True(t, r.NextAttemptAt.After(clock.Now()), "a next check")
		}
		require.Equal(t, "BlockedByReferrer", stuck(f.get(data)).Reason)
		require.Empty(t, f.rows(app), "waiting for a dependent is no row")

		// Two more due checks exhaust them.
		clock.Advance(time.Hour)
		require.Equal(t, 2, f.tick())
		clock.Advance(time.Hour)
		require.Equal(t, 2, f.tick())
		for _, r := range f.rows(data) {
			require.Equal(t, catalog.RetryDiscarded, r.State, "%s", r.ItemID)
			require.Equal(t, 3, r.Attempts)
		}
		x := f.requirePhase(data, catalog.PhaseDeleting)
		cond := stuck(x)
		require.Equal(t, retry.ReasonRetriesExhausted, cond.Reason)
		require.Contains(t, cond.Message, "Volume/prod/data is blocked by Restore/prod/r", "the chain stays in the message")
		f.requirePhase(app, catalog.PhaseDeleting)
		require.Equal(t, gc.OutcomeStuck, f.drive(app))

		// The referrer goes: its wait row goes; the finalizer is
		// removed: the rest is purged, and no row is left.
		_, err := f.c.Delete(f.ctx, restore.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		f.drive(restore)
		f.requirePurged(restore)
		require.Equal(t, gc.OutcomeStuck, f.drive(data), "still held by its finalizer")
		rows = f.rows(data)
		require.Len(t, rows, 1)
		require.Equal(t, "finalizer:example.com/drain", rows[0].ItemID)
		require.NoError(t, gc.Finalize(f.ctx, st, data.Key(), "example.com/drain"))
		require.Equal(t, gc.OutcomePurged, f.drive(app))
		f.requirePurged(app, data)
		require.Empty(t, f.rows(data))
	})
}

// TestDiscardAResourceRow: `retry discard` of a resource's row (by an
// operator, from a process with no collector) wakes the resource's work
// item; the collector, the one writer of its condition, sets
// DeletionStuck=Discarded, and nothing is purged. `retry now` clears it.
func TestDiscardAResourceRow(t *testing.T) {
	clock := catalogtest.NewClock(retryEpoch)
	onDriversAt(t, clock.Now, func(t *testing.T, st catalog.Store) {
		f := newRetryFixture(t, st, clock, 10)
		w := f.res("Widget", "w")
		require.NoError(t, os.WriteFile(filepath.Join(f.locks, "w.lock"), []byte("2h"), 0o600))
		require.Equal(t, gc.OutcomeStuck, f.del(w, gc.Foreground))
		row := f.rows(w)[0]
		_, err := f.q.Discard(f.ctx, row.ID, false)
		require.NoError(t, err)
		require.Equal(t, "PluginUnfinished", stuck(f.get(w)).Reason, "the queue does not write a resource's condition")
		wi, err := st.GetWork(f.ctx, gc.Queue, w.UID)
		require.NoError(t, err)
		require.False(t, wi.RunAt.After(clock.Now()), "woken")
		require.Equal(t, gc.OutcomeStuck, f.drive(w))
		cond := stuck(f.requirePhase(w, catalog.PhaseDeleting))
		require.Equal(t, retry.ReasonDiscarded, cond.Reason)
		require.True(t, strings.Contains(cond.Message, "discarded") || strings.Contains(cond.Message, "history"), cond.Message)

		_, err = f.q.RetryNow(f.ctx, row.ID, false)
		require.NoError(t, err)
		require.NoError(t, os.Remove(filepath.Join(f.locks, "w.lock")))
		require.Equal(t, 1, f.tick())
		f.requirePurged(w)
	})
}

// TestAResourceWhosePluginsFinishedSaysWhatElseItWaitsFor: once every
// plugin of a resource is done, its plugin row in the retry queue goes,
// and a resource still held (here by a user finalizer) says what holds
// it now (WaitingForFinalizer, with its own wait row), not an unfinished
// plugin.
func TestAResourceWhosePluginsFinishedSaysWhatElseItWaitsFor(t *testing.T) {
	clock := catalogtest.NewClock(retryEpoch)
	onDriversAt(t, clock.Now, func(t *testing.T, st catalog.Store) {
		f := newRetryFixture(t, st, clock, 10)
		w := f.res("Widget", "w", finalizer("example.com/hold"))
		require.NoError(t, os.WriteFile(filepath.Join(f.locks, "w.lock"), []byte("1h"), 0o600))
		require.Equal(t, gc.OutcomeStuck, f.del(w, gc.Foreground))
		require.Equal(t, "PluginUnfinished", stuck(f.requirePhase(w, catalog.PhaseDeleting)).Reason)

		require.NoError(t, os.Remove(filepath.Join(f.locks, "w.lock")))
		clock.Advance(61 * time.Minute)
		require.Positive(t, f.tick(), "the queue's collector steps it (its plugin row and its wait row are due)")
		x := f.requirePhase(w, catalog.PhaseDeleting)
		require.Equal(t, 1, f.count("test.lethe.io/a-first|widgets/prod/w"))
		require.NotContains(t, x.Finalizers, catalog.FinalizerDeleteActions, "its plugins are done")
		require.Equal(t, "WaitingForFinalizer", stuck(x).Reason)
		rows := f.rows(w)
		require.Len(t, rows, 1, "%+v", rows)
		require.Equal(t, retry.KindWait, rows[0].Kind)
		require.Equal(t, "finalizer:example.com/hold", rows[0].ItemID)
	})
}
