package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// The store's sessions run without JIT compilation and parallel workers
// (see sessionParams), unless the connection string says otherwise.
func TestSessionsRunWithoutJITOrParallelWorkers(t *testing.T) {
	url := os.Getenv("LETHE_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("set LETHE_TEST_POSTGRES_URL")
	}
	ctx := context.Background()
	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	schema := "lethe_test_" + hex.EncodeToString(buf)
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		require.NoError(t, err)
	})
	show := func(url string) (jit, workers string) {
		b, err := open(ctx, url, (&catalog.Config{Schema: schema}).WithDefaults())
		require.NoError(t, err)
		defer b.Close()
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT current_setting('jit'), current_setting('max_parallel_workers_per_gather')`).Scan(&jit, &workers))
		return jit, workers
	}
	jit, workers := show(url)
	require.Equal(t, "off", jit)
	require.Equal(t, "0", workers)

	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	jit, workers = show(url + sep + "jit=on&max_parallel_workers_per_gather=1")
	require.Equal(t, "on", jit, "the connection string wins")
	require.Equal(t, "1", workers)
}
