package apply_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// backends runs f on a fresh SQLite catalog and, when
// LETHE_TEST_POSTGRES_URL is set, on a fresh PostgreSQL schema. Each
// store's clock starts at catalogtest.Epoch.
func backends(t *testing.T, f func(t *testing.T, st catalog.Store, clock *catalogtest.Clock)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		clock := catalogtest.NewClock(catalogtest.Epoch)
		st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "c.db"),
			&catalog.Config{Now: clock.Now, PollInterval: 10 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		f(t, st, clock)
	})
	t.Run("postgres", func(t *testing.T) {
		url := os.Getenv("LETHE_TEST_POSTGRES_URL")
		if url == "" {
			t.Skip("set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
		}
		t.Parallel()
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		schema := "lethe_apply_" + hex.EncodeToString(b)
		clock := catalogtest.NewClock(catalogtest.Epoch)
		st, err := drivers.Open(context.Background(), url, &catalog.Config{Now: clock.Now, Schema: schema, PollInterval: 10 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = st.Close()
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
			require.NoError(t, err)
		})
		f(t, st, clock)
	})
}
