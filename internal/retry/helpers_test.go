package retry_test

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fixture is a real catalog (a SQLite file, or a schema of its own on
// PostgreSQL) with a settable clock.
type fixture struct {
	ctx   context.Context
	clock *catalogtest.Clock
	st    catalog.Store
	// open opens another store on the same database (another replica,
	// or the same process after a restart).
	open func() catalog.Store
	// exec runs SQL on the catalog's database behind the store's back
	// ($1-style parameters): what anyone who can write the catalog can do.
	exec func(sql string, args ...any)
	// url is the catalog's address.
	url string
}

var driverNames = []string{"sqlite", "postgres"}

func newFixture(t *testing.T, driver string) *fixture {
	t.Helper()
	return newFixtureAt(t, driver, epoch)
}

// newFixtureAt is newFixture with its clock stopped at start.
func newFixtureAt(t *testing.T, driver string, start time.Time) *fixture {
	t.Helper()
	clock := catalogtest.NewClock(start)
	var url string
	var cfg catalog.Config
	switch driver {
	case "sqlite":
		url = "sqlite://" + filepath.Join(t.TempDir(), "lethe.db")
	case "postgres":
		base := os.Getenv("LETHE_TEST_POSTGRES_URL")
		if base == "" {
			t.Skip("PostgreSQL tests are off: set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
		}
		b := make([]byte, 6)
		_, _ = crand.Read(b)
		cfg.Schema = "lethe_retry_test_" + hex.EncodeToString(b)
		url = base
		t.Cleanup(func() {
			conn, err := pgx.Connect(context.Background(), base)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			_, err = conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{cfg.Schema}.Sanitize()+` CASCADE`)
			require.NoError(t, err)
		})
	}
	f := &fixture{ctx: catalog.WithActor(context.Background(), "tester"), clock: clock, url: url}
	f.open = func() catalog.Store {
		c := cfg
		c.Now = clock.Now
		st, err := drivers.Open(context.Background(), url, &c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	f.st = f.open()
	f.exec = func(query string, args ...any) {
		t.Helper()
		switch driver {
		case "sqlite":
			db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(url, "sqlite://")+"?_pragma=busy_timeout(10000)")
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Exec(strings.ReplaceAll(query, "$", "?"), args...)
			require.NoError(t, err)
		case "postgres":
			conn, err := pgx.Connect(context.Background(), url)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			_, err = conn.Exec(context.Background(), `SET search_path TO `+pgx.Identifier{cfg.Schema}.Sanitize())
			require.NoError(t, err)
			_, err = conn.Exec(context.Background(), query, args...)
			require.NoError(t, err)
		}
	}
	return f
}

// queue returns a queue over st with a fixed jitter source.
func (f *fixture) queue(t *testing.T, st catalog.Store, p retry.Policy, webhooks ...string) *retry.Queue {
	t.Helper()
	q, err := retry.New(&retry.Config{Store: st, Policy: p, Webhooks: webhooks, Now: f.clock.Now, Rand: rand.New(rand.NewPCG(1, 2))})
	require.NoError(t, err)
	return q
}

// owner creates the resource whose deletion waits.
func (f *fixture) owner(t *testing.T, name string) *catalog.Resource {
	t.Helper()
	r, err := f.st.Create(f.ctx, &catalog.Resource{Kind: "Widget", Name: name})
	require.NoError(t, err)
	return r
}

func policy(maxAttempts int) retry.Policy {
	b := retry.DefaultBackoff()
	b.MaxAttempts = maxAttempts
	return retry.Policy{Default: b}
}

func condition(r *catalog.Resource, typ string) *catalog.Condition {
	for i := range r.Conditions {
		if r.Conditions[i].Type == typ {
			return &r.Conditions[i]
		}
	}
	return nil
}
