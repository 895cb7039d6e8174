package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/postgres"
)

// CollectBatch is one statement on PostgreSQL: the DELETE of the
// resources that can go returns their rows, from which the events,
// tombstones and audit entries are written. Each candidate's row is
// read once; the statements of one per table (a candidate SELECT
// ... FOR UPDATE, then INSERT ... SELECT joins for the changes, tombstones
// and audit, then the DELETE) read each five times, with the list parsed from JSON
// by each of eight statements.
func TestCollectBatchReadsEachRowOnce(t *testing.T) {
	t.Parallel()
	ctx := catalog.WithActor(context.Background(), "tester")
	url := testURL(t)
	schema := testSchema(t, url)
	open := func() catalog.Store {
		s, err := postgres.Open(context.Background(), url, &catalog.Config{Schema: schema})
		require.NoError(t, err)
		return s
	}
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// The rows of resources read so far, by any plan, once the rows
	// inserted and deleted are counted: a backend publishes its
	// statistics when it exits (the store is closed first).
	read := func(ins, del int64) int64 {
		var n int64
		require.Eventually(t, func() bool {
			var i, d int64
			require.NoError(t, conn.QueryRow(ctx, `SELECT COALESCE(sum(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0),
  COALESCE(sum(n_tup_ins), 0), COALESCE(sum(n_tup_del), 0)
FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'resources'`, schema).Scan(&n, &i, &d))
			return i >= ins && d >= del
		}, 20*time.Second, 50*time.Millisecond)
		return n
	}
	const n = 300
	s := open()
	batch := make([]*catalog.Resource, n)
	for i := range batch {
		batch[i] = &catalog.Resource{Kind: "Snapshot", Namespace: "ns", Name: fmt.Sprintf("s-%03d", i)}
	}
	created, err := s.CreateBatch(ctx, batch)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	before := read(n, 0)

	// Every resource goes: whatever the plan (index lookups or a
	// sequential scan of the table), each row is read once.
	s = open()
	items := make([]catalog.CollectItem, n)
	for i, r := range created {
		items[i] = catalog.CollectItem{UID: r.UID, ResourceVersion: r.ResourceVersion}
	}
	gone, err := s.CollectBatch(ctx, items)
	require.NoError(t, err)
	require.Len(t, gone, n)
	require.NoError(t, s.Close())
	require.LessOrEqual(t, read(n, n)-before, int64(n+10), "the rows of resources read by CollectBatch")
}
