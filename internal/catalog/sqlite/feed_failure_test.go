package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/sqlite"
)

// TestAFeedThatCannotReadTheChangeTableEndsWithAnError: a subscription
// whose read of the change table fails (here the table is moved away
// behind the store's back) ends with that error in Err, never as a clean
// stop, so its watcher knows the feed failed rather than that nothing
// changed.
func TestAFeedThatCannotReadTheChangeTableEndsWithAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	s, err := sqlite.Open(ctx, path, &catalog.Config{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	sub, err := s.Watch(ctx, catalog.WatchOptions{})
	require.NoError(t, err)
	defer sub.Close()

	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`ALTER TABLE changes RENAME TO changes_moved`)
	require.NoError(t, err)

	guard := time.NewTimer(30 * time.Second) // a hang guard, not a timing assertion
	defer guard.Stop()
	for open := true; open; {
		select {
		case _, open = <-sub.Events():
		case <-guard.C:
			t.Fatal("the subscription went on after its reads failed")
		}
	}
	require.Error(t, sub.Err(), "a failed feed is not a clean stop")
}
