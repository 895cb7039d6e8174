package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/sqlite"
)

// TestAPurgeWhoseWriteFailsChangesNothing: when one statement of a purge
// fails (here a trigger refuses its tombstone), Purge returns the error and
// the resource, its edges and the change feed stay as they were: nothing
// of a failed purge is committed.
func TestAPurgeWhoseWriteFailsChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := catalog.WithActor(context.Background(), "tester")
	path := filepath.Join(t.TempDir(), "catalog.db")
	s, err := sqlite.Open(ctx, path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	r, err := s.Create(ctx, &catalog.Resource{Kind: "Backup", Namespace: "ns", Name: "b"})
	require.NoError(t, err)
	_, err = s.Delete(ctx, r.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	before, err := s.CurrentVersion(ctx)
	require.NoError(t, err)

	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`CREATE TRIGGER refuse_tombstone BEFORE INSERT ON tombstones BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
	require.NoError(t, err)

	require.ErrorContains(t, s.Purge(ctx, r.Key(), catalog.PurgeOptions{}), "injected failure")
	got, err := s.Get(ctx, r.Key())
	require.NoError(t, err, "the resource is still there")
	require.Equal(t, catalog.PhaseDeleting, got.Phase)
	after, err := s.CurrentVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "no change was published")
}
