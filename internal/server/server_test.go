package server_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
	"github.com/lethehq/lethe/internal/server"
)

var noopBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lethe-server-test-")
	if err != nil {
		panic(err)
	}
	noopBin = filepath.Join(dir, "noop")
	if err := deletiontest.Build(noopBin, "../../plugins/noop"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
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
	_, err := e.del.Delete(ctx, "queued", deletion.Options{Async: true, Actor: "test"})
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
	_, err := e.st.Delete(ctx, backup.Key("stranded"), catalog.DeleteOptions{
		Finalizers: []string{catalog.FinalizerDeleteActions}, Actor: "test",
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
