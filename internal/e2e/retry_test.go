package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/retry"
)

type retryRowJSON struct {
	ID            int64     `json:"id"`
	Kind          string    `json:"type"` // BackupItem, Resource or Wait
	Key           string    `json:"key"`
	ItemID        string    `json:"itemId"`
	Plugin        string    `json:"plugin"`
	State         string    `json:"state"`
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"lastError"`
	NextAttemptAt time.Time `json:"nextAttemptAt"`
	History       []struct {
		Outcome string `json:"outcome"`
	} `json:"history"`
}

func (e *env) retryRows(args ...string) []retryRowJSON {
	e.t.Helper()
	r := e.ok(append([]string{"retry", "list", "-o", "json"}, args...)...)
	var v struct {
		Items []retryRowJSON `json:"items"`
	}
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &v), "%s", r)
	return v.Items
}

// TestRetryQueueThroughTheBinary: a failing item waits in the queue
// across runs of the lethe binary (each a new process on the same
// catalog), is discarded after --retry-max-attempts with the backup kept
// and marked DeletionStuck, and the notification the CLI recorded is
// delivered by a later `lethe server`, signed; an operator's requeue
// (audited) lets the server finish the deletion.
func TestRetryQueueThroughTheBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	var (
		mu    sync.Mutex
		hooks []http.Header
		body  [][]byte
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hooks, body = append(hooks, r.Header.Clone()), append(body, b)
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer hook.Close()
	// The webhook's own secret, in a file only its owner reads.
	secret := []byte("e2e-webhook-key-of-32-bytes-long")
	secretFile := filepath.Join(t.TempDir(), "hook.whsec")
	require.NoError(t, os.WriteFile(secretFile, []byte(retry.SecretPrefix+base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600))
	// Its URL carries credentials: they must reach the receiver, and
	// nowhere else (not the catalog, not the logs).
	hookURL := strings.Replace(hook.URL, "http://", "http://lethe:PassS3cr3t@", 1) + "/?token=T0kenS3cr3t"
	e.extra = append(e.extra, "LETHE_NOTIFY_WEBHOOKS="+hookURL+",secret-file="+secretFile, "LETHE_RETRY_MAX_ATTEMPTS=2")
	// An attacker who can write the catalog, and a server of its own.
	var stolen atomic.Int64
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer attacker.Close()

	e.create("stuck", 10)
	bad := archivetest.SpecN(4, 200).Name
	require.NoError(t, os.WriteFile(filepath.Join(e.control, bad+".fail"), nil, 0o600))

	r := e.run("backup", "delete", "stuck", "--yes")
	require.Equal(t, 3, r.code, "%s", r)
	rows := e.retryRows()
	require.Len(t, rows, 1)
	row := rows[0]
	require.Equal(t, "BackupItem", row.Kind)
	require.Equal(t, "Backup/stuck", row.Key)
	require.Equal(t, "retryable", row.State)
	require.Equal(t, 1, row.Attempts)
	require.Contains(t, row.LastError, "injected failure")
	require.True(t, row.NextAttemptAt.After(time.Now().Add(-time.Minute)))
	g := e.ok("backup", "get", "stuck")
	require.Contains(t, g.stdout, "Retry:      next attempt ")

	r = e.run("backup", "delete", "stuck", "--yes")
	require.Equal(t, 3, r.code, "%s", r)
	rows = e.retryRows("--state", "discarded")
	require.Len(t, rows, 1, "discarded after 2 attempts")
	require.Equal(t, 2, rows[0].Attempts)
	b := e.get("stuck")
	require.Equal(t, "Deleting", b.Phase)
	require.FileExists(t, e.tarballPath("stuck"), "nothing purged")
	g = e.ok("backup", "get", "stuck")
	require.Contains(t, g.stdout, "Condition:  DeletionStuck=True RetriesExhausted")

	// Operator controls: bad input and unknown rows change nothing.
	id := strconv.FormatInt(row.ID, 10)
	requireOneErrorLine(t, e.run("retry", "get", "abc"), "retry row id")
	requireOneErrorLine(t, e.run("retry", "get", "99999"), "not found")
	require.Equal(t, 4, e.run("retry", "now", "99999").code)
	require.Equal(t, 2, e.run("retry", "list", "--state", "bogus").code)
	require.Equal(t, 2, e.run("retry", "now").code)
	requireOneErrorLine(t, e.run("retry", "get", "backup", "nosuch"), `no retry row for Backup/nosuch`)
	require.Equal(t, 2, e.run("retry", "now", id, "-n", "prod").code, "-n goes with KIND NAME")
	out := e.ok("retry", "get", id)
	require.Contains(t, out.stdout, "History:")
	require.Contains(t, out.stdout, "discarded")
	// Rows are named by their owner too, as every other command names
	// things: a walkthrough needs no row number.
	require.Equal(t, out.stdout, e.ok("retry", "get", "bk", "stuck").stdout)
	dry := e.ok("retry", "now", "backup", "stuck", "--dry-run")
	require.Contains(t, dry.stdout, "retry row "+id+" (Backup/stuck ")
	require.Contains(t, dry.stdout, "dry run: nothing changed")
	require.Equal(t, "discarded", e.retryRows()[0].State)

	// The cause is fixed; the operator requeues, in the audit log.
	require.NoError(t, os.Remove(filepath.Join(e.control, bad+".fail")))
	e.ok("retry", "now", "Backup", "stuck")
	rows = e.retryRows()
	require.Equal(t, "retryable", rows[0].State)
	require.Equal(t, 0, rows[0].Attempts)
	audit := e.ok("audit", "--kind", "Backup", "--name", "stuck")
	require.Contains(t, audit.stdout, "retry-now")

	// The attack of issue 23: a row written straight into the catalog's
	// outbox, naming the attacker's URL, to get an event signed and sent
	// there.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.home, "lethe.db")+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	const forged = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0"
	_, err = db.Exec(`INSERT INTO notifications (event_id, event_type, target, body, state, next_attempt_at, available_at, created_at)
VALUES (?, 'DeletionStuck', ?, ?, 'pending', 0, 0, 0)`, forged, attacker.URL+"/steal",
		`{"id":"`+forged+`","type":"DeletionStuck","time":"2026-01-01T00:00:00Z","resource":{"kind":"Backup","name":"x"},"attempts":1,"reason":"forged","firstSeen":"2026-01-01T00:00:00Z","explain":"lethe explain backup x"}`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	// A server, started after the processes that recorded the event have
	// exited, delivers its notification and runs the requeued row.
	e.ok("plugin", "lock") // lethe server runs pinned plugins only
	srv := e.start("server")
	for i := 0; ; i++ {
		require.Less(t, i, 600, "the server did not finish the deletion\n%s", srv.errb)
		if res := e.run("backup", "get", "stuck"); res.code == 4 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; ; i++ {
		mu.Lock()
		n := len(hooks)
		mu.Unlock()
		if n >= 2 {
			break
		}
		require.Less(t, i, 600, "notifications not delivered\n%s", srv.errb)
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
	res := srv.wait(t)
	require.Equal(t, 0, res.code, "%s", res)
	e.requirePurged("stuck")
	require.Empty(t, e.retryRows())

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, hooks, 2, "one DeletionStuck, one DeletionCompleted: %v", hooks)
	types := []string{}
	for i, h := range hooks {
		require.NoError(t, retry.VerifyWebhook(secret, h.Get(retry.HeaderWebhookID), h.Get(retry.HeaderWebhookTimestamp),
			h.Get(retry.HeaderWebhookSignature), body[i], time.Now(), 5*time.Minute), "signature of %s", body[i])
		var ev retry.Event
		require.NoError(t, json.Unmarshal(body[i], &ev))
		require.Equal(t, ev.ID, h.Get(retry.HeaderIdempotencyKey))
		types = append(types, ev.Type)
		require.Equal(t, "lethe explain backup stuck", ev.Explain)
	}
	require.Equal(t, "DeletionStuck,DeletionCompleted", strings.Join(types, ","))
	for _, h := range hooks {
		require.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte("lethe:PassS3cr3t")), h.Get("Authorization"),
			"the credentials come from the configuration")
	}

	// The forged row went nowhere; it is audited.
	require.Zero(t, stolen.Load(), "nothing sent to a target that is not configured")
	refused := e.ok("audit", "--kind", retry.AuditKindNotification, "--name", forged)
	require.Contains(t, refused.stdout, retry.ActionNotificationRefused)
	require.Contains(t, res.stderr, "notification refused")
	// No credential in the catalog's files or the server's log.
	for _, name := range []string{"lethe.db", "lethe.db-wal"} {
		b, err := os.ReadFile(filepath.Join(e.home, name))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		require.False(t, bytes.Contains(b, []byte("S3cr3t")), "a webhook credential in %s", name)
	}
	require.NotContains(t, res.stderr, "S3cr3t")
}

// TestTwoServersOnPostgresRunEachRowOnce: two `lethe server` processes
// share one PostgreSQL catalog; every due row is run by one of them, once:
// each discarded row shows exactly its two attempts (one by the CLI, one
// by a server), never a third run.
func TestTwoServersOnPostgresRunEachRowOnce(t *testing.T) {
	t.Parallel()
	base := os.Getenv("LETHE_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("PostgreSQL tests are off: set LETHE_TEST_POSTGRES_URL")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	db := fmt.Sprintf("lethe_e2e_retry_%d", time.Now().UnixNano())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+db)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		_ = conn.Close(ctx)
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + db

	e := newEnv(t, pluginRecorder)
	e.extra = append(e.extra, "LETHE_STORE="+u.String(), "LETHE_RETRY_BACKOFF=300ms", "LETHE_RETRY_MAX_ATTEMPTS=2")
	const n = 6
	bad := archivetest.SpecN(2, 200).Name
	require.NoError(t, os.WriteFile(filepath.Join(e.control, bad+".fail"), nil, 0o600))
	for i := range n {
		name := fmt.Sprintf("b%d", i)
		e.create(name, 5)
		r := e.run("backup", "delete", name, "--yes")
		require.Equal(t, 3, r.code, "%s", r)
	}
	e.ok("plugin", "lock") // lethe server runs pinned plugins only
	a, b := e.start("server"), e.start("server")
	for i := 0; ; i++ {
		if len(e.retryRows("--state", "discarded")) == n {
			break
		}
		require.Less(t, i, 400, "rows not discarded\n%s\n%s", a.errb, b.errb)
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // a double run would have happened by now
	for _, p := range []*proc{a, b} {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		res := p.wait(t)
		require.Equal(t, 0, res.code, "%s", res)
	}
	rows := e.retryRows()
	require.Len(t, rows, n)
	for _, r := range rows {
		require.Equal(t, "discarded", r.State)
		require.Equal(t, 2, r.Attempts, "%+v", r)
		var outcomes []string
		for _, h := range r.History {
			outcomes = append(outcomes, h.Outcome)
		}
		require.Equal(t, []string{"failed", "failed", "discarded"}, outcomes, "row %d ran once per attempt", r.ID)
	}
}
