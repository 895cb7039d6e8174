package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/sqlite"
)

// TestFileWakeDeliversAnotherWritersCommit: with FileWake, a Watch sees a
// commit made through another handle on the file (as another process
// makes it: its own in-process wake-up does not reach this store) at
// once, though its poll is an hour away; without FileWake it waits for
// that poll.
func TestFileWakeDeliversAnotherWritersCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	open := func(fileWake bool) catalog.Store {
		s, err := sqlite.Open(ctx, path, &catalog.Config{PollInterval: time.Hour, FileWake: fileWake})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}
	watcher, plain, writer := open(true), open(false), open(false)
	watch := func(s catalog.Store) catalog.Subscription {
		v0, err := s.CurrentVersion(ctx)
		require.NoError(t, err)
		sub, err := s.Watch(ctx, catalog.WatchOptions{FromVersion: v0, Kind: "Database"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		return sub
	}
	woken, polling := watch(watcher), watch(plain)
	time.Sleep(200 * time.Millisecond) // both read their (empty) backlog and wait

	for _, name := range []string{"orders", "users"} {
		_, err := writer.Create(ctx, &catalog.Resource{Kind: "Database", Name: name})
		require.NoError(t, err)
		select {
		case ev := <-woken.Events():
			require.Equal(t, catalog.EventAdded, ev.Type)
			require.Equal(t, name, ev.Resource.Name)
		case <-time.After(10 * time.Second):
			t.Fatalf("the FileWake watch did not see %s created by another handle", name)
		}
	}
	select {
	case ev := <-polling.Events():
		t.Fatalf("a watch without FileWake saw %s before its poll: the test does not tell the two apart", ev.Resource.Name)
	case <-time.After(300 * time.Millisecond):
	}
}
