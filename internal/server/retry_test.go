package server_test

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/server"
)

// TestStuckBackupItemIsDeadLettered runs the whole path with a real
// plugin process, a real catalog and a real HTTP server, on an injected
// clock: an item that keeps failing is retried by the daemon's collector
// on the backoff schedule until its attempts run out; then its row is
// discarded, the backup gets DeletionStuck with the reason and the
// history, nothing is purged (the tarball and the record stay), and
// exactly one webhook arrives, signed. An operator's `retry now` after
// the cause is fixed runs the deletion again, which purges the backup.
func TestStuckBackupItemIsDeadLettered(t *testing.T) {
	dir := t.TempDir()
	clock := catalogtest.NewClock(time.Now().UTC().Truncate(time.Second))
	var (
		mu   sync.Mutex
		got  []*http.Request
		body [][]byte
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, body = append(got, r), append(body, b)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer hook.Close()
	secret := []byte("shared-secret-of-24-bytes-or-more")

	var q *retry.Queue
	pe := deletiontest.New(t, deletiontest.Options{
		Plugins: []string{recorderBin},
		PluginEnv: map[string]map[string]string{filepath.Base(recorderBin): {
			"LETHE_RECORD_FILE": filepath.Join(dir, "record.tsv"), "LETHE_RECORD_CONTROL_DIR": dir,
		}},
		Catalog: &catalog.Config{Now: clock.Now, PollInterval: 20 * time.Millisecond},
		Deletion: func(c *deletion.Config) {
			b := retry.DefaultBackoff()
			b.MaxAttempts = 3
			var err error
			q, err = retry.New(&retry.Config{Store: c.Store.(retry.Catalog), Policy: retry.Policy{Default: b},
				Webhooks: []string{hook.URL}, Now: clock.Now, Rand: rand.New(rand.NewPCG(3, 4))})
			require.NoError(t, err)
			c.Retry = q
		},
	})
	e := &env{pe: pe, st: pe.Store, del: pe.Deleter}
	ctx := catalog.WithActor(context.Background(), "test")
	e.add(t, "stuck", nil, nil)
	bad := archivetest.SpecN(3, 200).Name
	require.NoError(t, os.WriteFile(filepath.Join(dir, bad+".fail"), nil, 0o600))

	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, Now: clock.Now, NotifyWebhooks: []retry.Webhook{{URL: hook.URL, Secret: secret}}})
	require.NoError(t, err)
	col, notifier, err := srv.RetryParts()
	require.NoError(t, err)
	require.NotNil(t, notifier)

	rep, err := e.del.Delete(ctx, "stuck", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	r, err := e.st.Get(ctx, backup.Key("stuck"))
	require.NoError(t, err)
	rows, err := q.List(ctx, catalog.RetryFilter{OwnerUID: r.UID})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	row := rows[0]
	require.Equal(t, retry.KindBackupItem, row.Kind)
	require.Equal(t, "test.lethe.io/a-first", row.Plugin)
	require.Equal(t, 1, row.Attempts)

	// Nothing runs before the row is due; then the collector runs the
	// deletion, which records the next attempt.
	n, err := col.Tick(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "not due yet")
	for attempt := 2; attempt <= 3; attempt++ {
		cur, err := q.Get(ctx, row.ID)
		require.NoError(t, err)
		want := q.Policy().For(row.Plugin).Delay(attempt - 1)
		wait := cur.NextAttemptAt.Sub(clock.Now())
		require.InDelta(t, float64(want), float64(wait), float64(want)/10+float64(time.Second), "attempt %d waits %s, want %s±10%%", attempt, wait, want)
		clock.Advance(wait)
		n, err := col.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		cur, err = q.Get(ctx, row.ID)
		require.NoError(t, err)
		require.Equal(t, attempt, cur.Attempts)
	}
	dead, err := q.Get(ctx, row.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RetryDiscarded, dead.State)
	require.Contains(t, dead.LastError, "injected failure")

	// The deletion stays: record, finalizer, tarball.
	r, err = e.st.Get(ctx, backup.Key("stuck"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
	require.Contains(t, r.Finalizers, catalog.FinalizerDeleteActions)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	_, err = e.pe.Blobs.Stat(ctx, b.Spec.StorageKey)
	require.NoError(t, err, "the tarball is not purged")
	var stuck *catalog.Condition
	for i := range r.Conditions {
		if r.Conditions[i].Type == retry.ConditionDeletionStuck {
			stuck = &r.Conditions[i]
		}
	}
	require.NotNil(t, stuck, "%+v", r.Conditions)
	require.Equal(t, "True", stuck.Status)
	require.Contains(t, stuck.Message, "injected failure")
	require.Contains(t, stuck.Message, "history:")
	// Not run again by the collector, however long we wait.
	clock.Advance(30 * 24 * time.Hour)
	n, err = col.Tick(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	// Exactly one webhook, signed, with the documented body.
	sent, err := notifier.DeliverDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sent)
	sent, err = notifier.DeliverDue(ctx)
	require.NoError(t, err)
	require.Zero(t, sent)
	mu.Lock()
	require.Len(t, got, 1)
	req, raw := got[0], body[0]
	mu.Unlock()
	assert.NoError(t, retry.VerifyWebhook(secret, req.Header.Get(retry.HeaderWebhookID), req.Header.Get(retry.HeaderWebhookTimestamp),
		req.Header.Get(retry.HeaderWebhookSignature), raw, clock.Now(), 5*time.Minute))
	var ev retry.Event
	require.NoError(t, json.Unmarshal(raw, &ev))
	assert.Equal(t, retry.EventDeletionStuck, ev.Type)
	assert.Equal(t, req.Header.Get(retry.HeaderIdempotencyKey), ev.ID)
	assert.Equal(t, retry.EventResource{Kind: backup.Kind, Name: "stuck", UID: r.UID}, ev.Resource)
	assert.Equal(t, "test.lethe.io/a-first", ev.Plugin)
	assert.Equal(t, 3, ev.Attempts)
	assert.Contains(t, ev.LastError, "injected failure")
	assert.Equal(t, "lethe explain backup stuck", ev.Explain)

	// The operator fixes the cause and requeues: the collector runs the
	// deletion at once, and it purges the backup.
	require.NoError(t, os.Remove(filepath.Join(dir, bad+".fail")))
	_, err = q.RetryNow(catalog.WithActor(ctx, "cli:alice"), row.ID, false)
	require.NoError(t, err)
	n, err = col.Tick(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = e.st.GetTombstone(ctx, backup.Key("stuck"))
	require.NoError(t, err, "purged once the item is done")
	left, err := q.List(ctx, catalog.RetryFilter{})
	require.NoError(t, err)
	require.Empty(t, left)
	sent, err = notifier.DeliverDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sent, "DeletionCompleted")
}

// TestBackupItemsRetryTogetherNotBeforeRetryAfter: a backup with a failed
// item (due after the backoff) and a blocked one (its plugin asked for
// two hours) is not run when the failed item is due: that would ask the
// blocking plugin again before its retryAfter. The failed item is put
// off, without an attempt, until both run together.
func TestBackupItemsRetryTogetherNotBeforeRetryAfter(t *testing.T) {
	dir := t.TempDir()
	clock := catalogtest.NewClock(time.Now().UTC().Truncate(time.Second))
	var q *retry.Queue
	pe := deletiontest.New(t, deletiontest.Options{
		Plugins: []string{recorderBin},
		PluginEnv: map[string]map[string]string{filepath.Base(recorderBin): {
			"LETHE_RECORD_FILE": filepath.Join(dir, "record.tsv"), "LETHE_RECORD_CONTROL_DIR": dir,
		}},
		Catalog: &catalog.Config{Now: clock.Now, PollInterval: 20 * time.Millisecond},
		Deletion: func(c *deletion.Config) {
			var err error
			q, err = retry.New(&retry.Config{Store: c.Store.(retry.Catalog), Now: clock.Now, Rand: rand.New(rand.NewPCG(5, 6))})
			require.NoError(t, err)
			c.Retry = q
		},
	})
	e := &env{pe: pe, st: pe.Store, del: pe.Deleter}
	ctx := catalog.WithActor(context.Background(), "test")
	e.add(t, "two", nil, nil)
	require.NoError(t, os.WriteFile(filepath.Join(dir, archivetest.SpecN(1, 200).Name+".fail"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, archivetest.SpecN(2, 200).Name+".lock"), []byte("2h"), 0o600))
	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, Now: clock.Now})
	require.NoError(t, err)
	col, _, err := srv.RetryParts()
	require.NoError(t, err)
	rep, err := e.del.Delete(ctx, "two", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	start := clock.Now()

	byOutcome := func() map[string]*catalog.RetryRow {
		rows, err := q.List(ctx, catalog.RetryFilter{})
		require.NoError(t, err)
		require.Len(t, rows, 2)
		out := map[string]*catalog.RetryRow{}
		for _, r := range rows {
			out[r.History[0].Outcome] = r
		}
		return out
	}
	rows := byOutcome()
	require.True(t, rows["failed"].NextAttemptAt.Before(start.Add(time.Minute)))
	require.Equal(t, start.Add(2*time.Hour), rows["blocked"].NextAttemptAt)

	clock.Advance(time.Minute)
	n, err := col.Tick(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the failed item is due")
	rows = byOutcome()
	require.Equal(t, 1, rows["failed"].Attempts, "put off, not run")
	require.Equal(t, 1, rows["blocked"].Attempts, "the blocking plugin was not asked again")
	require.Equal(t, start.Add(2*time.Hour), rows["failed"].NextAttemptAt, "put off until the blocked item is due")

	clock.Advance(2 * time.Hour)
	n, err = col.Tick(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	rows = byOutcome()
	require.Equal(t, 2, rows["failed"].Attempts, "run together")
	require.Equal(t, 2, rows["blocked"].Attempts)
}
