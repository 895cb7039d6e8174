package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/server"
)

var noopBin, recorderBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lethe-server-test-")
	if err != nil {
		panic(err)
	}
	noopBin = filepath.Join(dir, "noop")
	recorderBin = filepath.Join(dir, "recorder")
	for bin, pkg := range map[string]string{noopBin: "../../plugins/noop", recorderBin: "../deletion/testdata/recorder"} {
		if err := deletiontest.Build(bin, pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	// goleak: Run stops every part it started, also when it fails.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

type env struct {
	pe  *deletiontest.Env
	st  catalog.Store
	del *deletion.Deleter
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pe := deletiontest.New(t, deletiontest.Options{
		Plugins: []string{noopBin},
		Catalog: &catalog.Config{PollInterval: 20 * time.Millisecond},
	})
	return &env{pe: pe, st: pe.Store, del: pe.Deleter}
}

func (e *env) add(t *testing.T, name string, expires *time.Time, annotations map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, archivetest.WriteN(&buf, 20, 200))
	e.pe.AddBackup(name, &buf, annotations, expires)
}

// waitPurged waits, a bounded number of times, for the backup's tombstone.
func (e *env) waitPurged(t *testing.T, name string) *catalog.Tombstone {
	t.Helper()
	for range 400 {
		if ts, err := e.st.GetTombstone(context.Background(), backup.Key(name)); err == nil {
			return ts
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, err := e.st.Get(context.Background(), backup.Key(name))
	t.Fatalf("backup %s was not purged: %+v %v", name, r, err)
	return nil
}

func TestServerDeletesExpiredBackupsThroughTheGraceWindow(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	past := time.Now().Add(-time.Minute)
	future := time.Now().Add(time.Hour)
	e.add(t, "expired", &past, map[string]string{catalog.AnnotationDeletionDelay: "300ms"})
	e.add(t, "fresh", &future, nil)
	e.add(t, "queued", nil, nil)
	_, err := e.del.Delete(catalog.WithActor(ctx, "test"), "queued", deletion.Options{Async: true})
	require.NoError(t, err)

	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	// Queued with --async: a worker runs it.
	ts := e.waitPurged(t, "queued")
	require.Contains(t, ts.Actor, "server:")

	// Expired: TTL requests the deletion, the grace window schedules it,
	// the timer moves it on, a worker runs it.
	e.waitPurged(t, "expired")
	entries, err := e.st.ListAudit(ctx, catalog.AuditFilter{Kind: backup.Kind, Name: "expired"})
	require.NoError(t, err)
	var actions []string
	for _, a := range entries {
		actions = append(actions, a.Action)
		// The leader's loops write under its term, which the audit names.
		switch a.Action {
		case "schedule":
			require.Equal(t, "ttl (leader term 1)", a.Actor)
		case "delete":
			require.Equal(t, "softdelete (leader term 1)", a.Actor)
		}
	}
	require.Subset(t, actions, []string{"schedule", "delete", "purge"}, "the expired backup must go through the grace window: %v", actions)

	r, err := e.st.Get(ctx, backup.Key("fresh"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)

	cancel()
	require.NoError(t, <-done)
}

// TestServerResumesADeletionWithoutAWorkItem: a backup left in Deleting
// without its work item (a crash between the two writes) is queued again
// and deleted.
func TestServerResumesADeletionWithoutAWorkItem(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	e.add(t, "stranded", nil, nil)
	_, err := e.st.Delete(catalog.WithActor(ctx, "test"), backup.Key("stranded"), catalog.DeleteOptions{
		Finalizers: []string{catalog.FinalizerDeleteActions},
	})
	require.NoError(t, err)
	work, err := e.st.ListWork(ctx, deletion.Queue)
	require.NoError(t, err)
	require.Empty(t, work)

	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	e.waitPurged(t, "stranded")
	cancel()
	require.NoError(t, <-done)
}

// TestServerRaisesAVanishedTarballOnce: an expired backup whose tarball is
// gone is raised once by the daemon (the TarballMissing condition and one
// warning), and its deletion is parked, not retried on every poll, and
// never purged on its own.
func TestServerRaisesAVanishedTarballOnce(t *testing.T) {
	var logs syncBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	pe := deletiontest.New(t, deletiontest.Options{
		Plugins:  []string{noopBin},
		Catalog:  &catalog.Config{PollInterval: 20 * time.Millisecond},
		Deletion: func(c *deletion.Config) { c.Logger = logger },
	})
	e := &env{pe: pe, st: pe.Store, del: pe.Deleter}
	ctx, cancel := context.WithCancel(context.Background())
	past := time.Now().Add(-time.Minute)
	e.add(t, "vanished", &past, nil)
	require.NoError(t, e.pe.Blobs.Delete(ctx, backup.StorageKey("vanished")))

	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, Logger: logger, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	var r *catalog.Resource
	for range 400 {
		r, err = e.st.Get(ctx, backup.Key("vanished"))
		require.NoError(t, err)
		if w, err := e.st.GetWork(ctx, deletion.Queue, r.UID); err == nil && w.Attempts > 0 && w.Holder == "" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Many poll intervals later, nothing more has happened.
	time.Sleep(500 * time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	r, err = e.st.Get(context.Background(), backup.Key("vanished"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
	var cond *catalog.Condition
	for i := range r.Conditions {
		if r.Conditions[i].Type == backup.ConditionTarballMissing {
			cond = &r.Conditions[i]
		}
	}
	require.NotNil(t, cond, "conditions: %+v", r.Conditions)
	require.Equal(t, "True", cond.Status)
	w, err := e.st.GetWork(context.Background(), deletion.Queue, r.UID)
	require.NoError(t, err)
	require.Equal(t, 1, w.Attempts, "claimed once, then parked")
	require.True(t, w.RunAt.After(time.Now().Add(10*365*24*time.Hour)), "parked: %s", w.RunAt)
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "TarballMissing"), "raised once:\n%s", out)
	require.NotContains(t, out, "[ERROR]", "nothing else shouts about it:\n%s", out)
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBlockedRetryAfterNeitherSpinsNorStalls: a plugin that answers
// Blocked with a retryAfter of 0, a negative one and a huge one has its
// deletion claimed once, then requeued between one minute and one hour
// later: the daemon does not spin on it, and does not put it off for good.
func TestBlockedRetryAfterNeitherSpinsNorStalls(t *testing.T) {
	dir := t.TempDir()
	for i, after := range []string{"0s", "-5m", "100000h"} {
		name := archivetest.SpecN(i, 200).Name
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".lock"), []byte(after), 0o600))
	}
	pe := deletiontest.New(t, deletiontest.Options{
		Plugins: []string{recorderBin},
		// Plugins inherit nothing from Lethe's environment.
		PluginEnv: map[string]map[string]string{filepath.Base(recorderBin): {
			"LETHE_RECORD_FILE":        filepath.Join(dir, "record.tsv"),
			"LETHE_RECORD_CONTROL_DIR": dir,
		}},
		Catalog: &catalog.Config{PollInterval: 20 * time.Millisecond},
	})
	e := &env{pe: pe, st: pe.Store, del: pe.Deleter}
	ctx, cancel := context.WithCancel(context.Background())
	e.add(t, "locked", nil, nil)
	start := time.Now()
	_, err := e.del.Delete(catalog.WithActor(ctx, "test"), "locked", deletion.Options{Async: true})
	require.NoError(t, err)
	r, err := e.st.Get(ctx, backup.Key("locked"))
	require.NoError(t, err)

	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	for range 400 {
		if w, err := e.st.GetWork(ctx, deletion.Queue, r.UID); err == nil && w.Attempts > 0 && w.Holder == "" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // 25 poll intervals
	cancel()
	require.NoError(t, <-done)

	w, err := e.st.GetWork(context.Background(), deletion.Queue, r.UID)
	require.NoError(t, err)
	require.Equal(t, 1, w.Attempts, "claimed once: the daemon does not spin")
	_, rows, err := e.st.LoadProgress(context.Background(), r.UID)
	require.NoError(t, err)
	require.Len(t, rows, 3, "the three items are blocked")
	// The items wait in the retry queue: none due before its (clamped)
	// retryAfter or the backoff, the huge one held to 24h; one attempt
	// each, so the collector did not run them again.
	queued, err := e.del.Retry().List(context.Background(), catalog.RetryFilter{OwnerUID: r.UID})
	require.NoError(t, err)
	require.Len(t, queued, 3)
	for _, q := range queued {
		require.Equal(t, 1, q.Attempts, "%+v", q)
		require.False(t, q.NextAttemptAt.Before(start.Add(retry.BaseDefault-retry.BaseDefault/10)), "%+v", q)
		require.True(t, q.NextAttemptAt.Before(time.Now().Add(24*time.Hour+time.Minute)), "a huge retryAfter is held to 24h: %+v", q)
	}
}

// TestRunStopsEverythingWhenItCannotListen: a metrics address already in
// use fails Run, and Run stops every part it had started before
// returning (goleak checks that nothing is left running).
func TestRunStopsEverythingWhenItCannotListen(t *testing.T) {
	e := newEnv(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, MetricsAddr: busy.Addr().String()})
	require.NoError(t, err)
	before := goleak.IgnoreCurrent()
	err = srv.Run(context.Background())
	require.ErrorContains(t, err, "address already in use")
	require.NoError(t, goleak.Find(before), "Run left goroutines running")
}

// TestAFailingLoopIsRestartedNotFatal: a loop that fails (a transient
// catalog error, say) or returns early is restarted after a backoff; the
// server keeps serving, and the restarts are counted. Before, one loop's
// error stopped the whole server: a replica of the fleet exited on its own.
func TestAFailingLoopIsRestartedNotFatal(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int32
	steady := make(chan struct{})
	flaky := server.Loop{Name: "flaky", Run: func(ctx context.Context) error {
		switch runs.Add(1) {
		case 1:
			return errors.New("deadlock detected")
		case 2:
			return nil // returned early, no error
		}
		close(steady)
		<-ctx.Done()
		return nil
	}}
	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, Loops: []server.Loop{flaky}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-steady:
	case err := <-done:
		t.Fatalf("the server stopped on a loop's failure: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the failed loop was not restarted")
	}
	select {
	case err := <-done:
		t.Fatalf("the server stopped: %v", err)
	default:
	}
	require.Equal(t, 2.0, restartsOf(t, srv, "flaky"))
	cancel()
	require.NoError(t, <-done)
}

// restartsOf reads lethe_loop_restarts_total{loop=name} from the
// server's registry.
func restartsOf(t *testing.T, srv *server.Server, name string) float64 {
	t.Helper()
	mfs, err := srv.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "lethe_loop_restarts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "loop" && l.GetValue() == name {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no lethe_loop_restarts_total{loop=%q}", name)
	return 0
}
