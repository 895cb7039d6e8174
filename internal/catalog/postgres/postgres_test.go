package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/catalog/postgres"
)

const urlEnv = "LETHE_TEST_POSTGRES_URL"

func TestMain(m *testing.M) {
	catalogtest.HelperMain() // returns unless re-executed as a helper process
	goleak.VerifyTestMain(m)
}

// testURL returns the test database URL, or skips.
func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		t.Skipf("PostgreSQL tests are off: set %s, e.g. %s='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'", urlEnv, urlEnv)
	}
	return u
}

// testSchema creates nothing; it names a fresh schema and drops it (with
// everything in it) when t ends. drivers create the schema on open.
func testSchema(t testing.TB, url string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "lethe_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		require.NoError(t, err)
	})
	return schema
}

func newStore(t testing.TB, cfg *catalog.Config) catalog.Store {
	t.Helper()
	url := testURL(t)
	var c catalog.Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = testSchema(t, url)
	// Only NOTIFY may wake a subscriber in these tests: the safety-net
	// poll (10×PollInterval) never fires.
	c.PollInterval = time.Hour
	s, err := postgres.Open(context.Background(), url, &c)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	testURL(t)
	catalogtest.Run(t, newStore)
}

func TestSchemaTooNew(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	schema := testSchema(t, url)
	cfg := &catalog.Config{Schema: schema}
	catalogtest.RunSchemaTooNew(t,
		func() (catalog.Store, error) { return postgres.Open(context.Background(), url, cfg) },
		func(t *testing.T) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "lethe_migrations"}.Sanitize()+
				` (version, name, applied_at) VALUES (999, 'from_the_future', 0)`)
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

// migrated returns the target of a fresh, migrated schema.
func migrated(t *testing.T) catalogtest.Target {
	url := testURL(t)
	schema := testSchema(t, url)
	s, err := postgres.Open(context.Background(), url, &catalog.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	return catalogtest.Target{URL: url, Schema: schema, PollInterval: time.Hour}
}

func BenchmarkInsert(b *testing.B)     { catalogtest.BenchInsert(b, newStore) }
func BenchmarkDependents(b *testing.B) { catalogtest.BenchDependents(b, newStore) }
func BenchmarkClaims(b *testing.B)     { catalogtest.BenchClaims(b, newStore) }
func BenchmarkCollect(b *testing.B)    { catalogtest.BenchCollect(b, newStore) }

func TestAuditIsAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testURL(t)
	tg := migrated(t)
	s, err := postgres.Open(ctx, url, &catalog.Config{Schema: tg.Schema})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.AppendAudit(ctx, catalog.AuditEntry{Actor: "a", Action: "x", Kind: "K", Name: "n"}))
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	audit := pgx.Identifier{tg.Schema, "audit"}.Sanitize()
	_, err = conn.Exec(ctx, `UPDATE `+audit+` SET actor = 'mallory'`)
	require.ErrorContains(t, err, "append-only")
	_, err = conn.Exec(ctx, `DELETE FROM `+audit)
	require.ErrorContains(t, err, "append-only")
	// TRUNCATE skips row triggers; a statement trigger refuses it, even
	// for a superuser.
	_, err = conn.Exec(ctx, `TRUNCATE `+audit)
	require.ErrorContains(t, err, "append-only")
}

func TestOpenByURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testURL(t)
	schema := testSchema(t, url)
	for i, u := range []string{url, "postgresql" + strings.TrimPrefix(url, "postgres")} {
		s, err := drivers.Open(ctx, u, &catalog.Config{Schema: schema})
		require.NoError(t, err, u)
		_, err = s.Create(ctx, &catalog.Resource{Kind: "K", Name: "n"})
		if i == 0 {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, catalog.ErrAlreadyExists, "the second open sees the first's data")
		}
		require.NoError(t, s.Close())
	}
}

func TestConcurrentOpen(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	schema := testSchema(t, url)
	catalogtest.RunConcurrentOpen(t, func() (catalog.Store, error) {
		return postgres.Open(context.Background(), url, &catalog.Config{Schema: schema})
	})
}
