package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/server"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// waitFor polls cond, a bounded number of times.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// unreachable is the real store whose CurrentVersion fails once cut.
type unreachable struct {
	catalog.Store
	cut chan struct{}
}

func (u *unreachable) CurrentVersion(ctx context.Context) (int64, error) {
	select {
	case <-u.cut:
		return 0, errors.New("connection refused")
	default:
		return u.Store.CurrentVersion(ctx)
	}
}

// TestHealthReadinessAndMetrics: /healthz, /readyz and /metrics live on
// the metrics address, every other path is a 404; /readyz says leader or
// follower and turns 503 when the catalog does not answer.
func TestHealthReadinessAndMetrics(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	st := &unreachable{Store: e.st, cut: make(chan struct{})}
	plugins := 1
	srv, err := server.New(&server.Config{Store: st, Deleter: e.del, MetricsListener: ln, PollInterval: 50 * time.Millisecond,
		Plugins: func() int { return plugins }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	base := "http://" + ln.Addr().String()

	code, body := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"ok"}`, body)
	waitFor(t, "leadership", srv.Leading)
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code, body)
	var rd server.Readiness
	require.NoError(t, json.Unmarshal([]byte(body), &rd))
	require.Equal(t, "ok", rd.Status)
	require.Equal(t, "leader", rd.Role)
	require.Equal(t, e.del.Holder(), rd.Leader)
	require.Equal(t, 1, *rd.Plugins)

	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, m := range []string{
		"lethe_leader 1", `lethe_backups{phase="Active"}`, "lethe_deletions_in_flight 0", "lethe_lease_takeovers_total",
		`lethe_work_items{queue="deletion",state="due"}`, "lethe_catalog_up 1", "lethe_backups_plugin_missing 0",
		"lethe_leader_elections_total 1",
	} {
		require.Contains(t, body, m)
	}
	for _, p := range []string{"/", "/foo", "/metrics/x", "/healthz/", "/readyzz"} {
		code, _ := get(t, base+p)
		require.Equal(t, http.StatusNotFound, code, p)
	}

	close(st.cut)
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, "catalog unreachable")
	code, _ = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code, "the process is up")
	cancel()
	require.NoError(t, <-done)
}

// TestReadyzWithoutPlugins: no plugin loaded is not ready (unless
// --no-plugins said so).
func TestReadyzWithoutPlugins(t *testing.T) {
	e := newEnv(t)
	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, Plugins: func() int { return 0 }})
	require.NoError(t, err)
	rd := srv.Ready(context.Background())
	require.Equal(t, "unavailable", rd.Status)
	require.Contains(t, rd.Reasons, "no plugin loaded")
	require.Equal(t, "follower", rd.Role)
	srv, err = server.New(&server.Config{Store: e.st, Deleter: e.del, Plugins: func() int { return 0 }, NoPlugins: true})
	require.NoError(t, err)
	require.Equal(t, "ok", srv.Ready(context.Background()).Status)
}

// TestTwoServersOnOneSQLiteFile: a second server on the same SQLite file
// is safe: one of the two leads (TTL expiry runs once), both claim from
// the one queue, and every backup is purged exactly once.
func TestTwoServersOnOneSQLiteFile(t *testing.T) {
	e := newEnv(t)
	st2, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(e.pe.Dir, "lethe.db"), &catalog.Config{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	defer st2.Close()
	del2, err := deletion.New(&deletion.Config{Store: st2, Blobs: e.pe.Blobs, Plugins: deletion.HostPlugins(e.pe.Host), Holder: "second server"})
	require.NoError(t, err)
	defer del2.Close()
	past := time.Now().Add(-time.Minute)
	names := []string{"a", "b", "c", "d", "e", "f"}
	for _, n := range names {
		e.add(t, n, &past, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var srvs []*server.Server
	done := make(chan error, 2)
	for _, c := range []*server.Config{
		{Store: e.st, Deleter: e.del, PollInterval: 50 * time.Millisecond},
		{Store: st2, Deleter: del2, PollInterval: 50 * time.Millisecond},
	} {
		srv, err := server.New(c)
		require.NoError(t, err)
		srvs = append(srvs, srv)
		go func() { done <- srv.Run(ctx) }()
	}
	for _, n := range names {
		e.waitPurged(t, n)
	}
	leading := 0
	for _, s := range srvs {
		if s.Leading() {
			leading++
		}
	}
	require.Equal(t, 1, leading)
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	for _, n := range names {
		audit, err := e.st.ListAudit(context.Background(), catalog.AuditFilter{Kind: backup.Kind, Name: n})
		require.NoError(t, err)
		var purges, requests int
		for _, a := range audit {
			if strings.Contains(a.Action, "purge") {
				purges++
			}
			if a.Reason == "TTL expired" {
				requests++
			}
		}
		require.Equal(t, 1, purges, "%s: %+v", n, audit)
		require.Equal(t, 1, requests, "%s: the TTL expiry is requested once: %+v", n, audit)
	}
}

// TestIdleWorkersAreWokenNotPolled: with the safety-net poll an hour away,
// a deletion queued while the workers sleep runs at once: the enqueue's
// wake-up woke them.
func TestIdleWorkersAreWokenNotPolled(t *testing.T) {
	e := newEnv(t)
	e.add(t, "queued-later", nil, nil)
	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, PollInterval: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	waitFor(t, "leadership", srv.Leading) // started, idle
	_, err = e.del.Delete(catalog.WithActor(ctx, "test"), "queued-later", deletion.Options{Async: true})
	require.NoError(t, err)
	e.waitPurged(t, "queued-later")
	cancel()
	require.NoError(t, <-done)
}

// TestDeletionLeaseTakeoverIsCounted: a deletion whose lease a stalled
// replica let expire is taken over by a worker, purged, and counted in
// lethe_lease_takeovers_total{lease="deletion"}.
func TestDeletionLeaseTakeoverIsCounted(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.add(t, "stalled", nil, nil)
	_, err := e.del.Delete(catalog.WithActor(ctx, "test"), "stalled", deletion.Options{Async: true})
	require.NoError(t, err)
	r, err := e.st.Get(ctx, backup.Key("stalled"))
	require.NoError(t, err)
	// Another replica claims the deletion and stalls: it never renews
	// nor releases its short lease.
	_, err = e.st.ClaimKey(ctx, deletion.Queue, r.UID, "stalled-replica pid 1", 200*time.Millisecond)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, MetricsListener: ln, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	e.waitPurged(t, "stalled")

	_, body := get(t, "http://"+ln.Addr().String()+"/metrics")
	require.Contains(t, body, `lethe_lease_takeovers_total{lease="deletion"} 1`)
	cancel()
	require.NoError(t, <-done)
}
