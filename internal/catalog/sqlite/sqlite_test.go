package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/catalog/sqlite"
)

func TestMain(m *testing.M) {
	catalogtest.HelperMain() // returns unless re-executed as a helper process
	goleak.VerifyTestMain(m)
}

func newStore(t testing.TB, cfg *catalog.Config) catalog.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "catalog.db"), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	catalogtest.Run(t, newStore)
}

func TestSchemaTooNew(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "catalog.db")
	catalogtest.RunSchemaTooNew(t,
		func() (catalog.Store, error) { return sqlite.Open(context.Background(), path, nil) },
		func(t *testing.T) {
			db, err := sql.Open("sqlite", "file:"+path)
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Exec(`INSERT INTO lethe_migrations (version, name, applied_at) VALUES (999, 'from_the_future', 0)`)
			require.NoError(t, err)
		})
}

func TestCrossProcessClaims(t *testing.T) {
	t.Parallel()
	catalogtest.RunCrossProcessClaims(t, migrated(t))
}

func TestCrossProcessWatch(t *testing.T) {
	t.Parallel()
	catalogtest.RunCrossProcessWatch(t, migrated(t))
}

// migrated returns the target of a fresh, migrated database file.
func migrated(t *testing.T) catalogtest.Target {
	path := filepath.Join(t.TempDir(), "catalog.db")
	s, err := sqlite.Open(context.Background(), path, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	return catalogtest.Target{URL: "sqlite://" + path}
}

func BenchmarkInsert(b *testing.B)     { catalogtest.BenchInsert(b, newStore) }
func BenchmarkDependents(b *testing.B) { catalogtest.BenchDependents(b, newStore) }
func BenchmarkClaims(b *testing.B)     { catalogtest.BenchClaims(b, newStore) }
func BenchmarkCollect(b *testing.B)    { catalogtest.BenchCollect(b, newStore) }

func TestAuditIsAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	s, err := sqlite.Open(ctx, path, nil)
	require.NoError(t, err)
	require.NoError(t, s.AppendAudit(ctx, catalog.AuditEntry{Actor: "a", Action: "x", Kind: "K", Name: "n"}))
	require.NoError(t, s.Close())
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`UPDATE audit SET actor = 'mallory'`)
	require.ErrorContains(t, err, "append-only")
	_, err = db.Exec(`DELETE FROM audit`)
	require.ErrorContains(t, err, "append-only")
}

func TestConcurrentOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "catalog.db")
	catalogtest.RunConcurrentOpen(t, func() (catalog.Store, error) { return sqlite.Open(context.Background(), path, nil) })
}
