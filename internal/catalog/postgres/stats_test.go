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

// On a server whose autovacuum is off, a bulk load leaves the graph
// tables analyzed: without statistics, the planner took CollectBatch's
// edge deletes for a sequential scan of owner_edges (see statsKeeper).
func TestBulkLoadAnalyzesWhenAutovacuumIsOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testURL(t)
	conn := autovacuumOffConn(ctx, t, url)
	s, schema := openInSchema(t, url)
	analyzed := func(table string) bool {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stats WHERE schemaname = $1 AND tablename = $2`, schema, table).Scan(&n))
		return n > 0
	}
	owner, err := s.Create(ctx, &catalog.Resource{Kind: "Schedule", Name: "root"})
	require.NoError(t, err)
	require.False(t, analyzed("owner_edges"), "a fresh schema has no statistics")
	batch := make([]*catalog.Resource, 200)
	for i := range batch {
		batch[i] = &catalog.Resource{Kind: "Snapshot", Name: fmt.Sprintf("s-%03d", i),
			Owners: []catalog.OwnerRef{{UID: owner.UID, Kind: owner.Kind, Name: owner.Name}}}
	}
	_, err = s.CreateBatch(ctx, batch)
	require.NoError(t, err)
	// In the background: soon after the commit.
	require.Eventually(t, func() bool { return analyzed("owner_edges") && analyzed("resources") }, 10*time.Second, 20*time.Millisecond,
		"200 new edges and resources pass the threshold (50 + 10%)")
}

// CollectBatch's inserts count too, though they are one statement of
// data-modifying WITH clauses: a cascade leaves tombstones analyzed (the
// ANALYZE invalidates the plans connections cached while it was small).
func TestCollectBatchAnalyzesTombstonesWhenAutovacuumIsOff(t *testing.T) {
	t.Parallel()
	ctx := catalog.WithActor(context.Background(), "tester")
	url := testURL(t)
	conn := autovacuumOffConn(ctx, t, url)
	s, schema := openInSchema(t, url)
	batch := make([]*catalog.Resource, 200)
	for i := range batch {
		batch[i] = &catalog.Resource{Kind: "Snapshot", Name: fmt.Sprintf("s-%03d", i)}
	}
	created, err := s.CreateBatch(ctx, batch)
	require.NoError(t, err)
	items := make([]catalog.CollectItem, len(created))
	for i, r := range created {
		items[i] = catalog.CollectItem{UID: r.UID, ResourceVersion: r.ResourceVersion}
	}
	gone, err := s.CollectBatch(ctx, items)
	require.NoError(t, err)
	require.Len(t, gone, len(items))
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stats WHERE schemaname = $1 AND tablename = 'tombstones'`, schema).Scan(&n))
		return n > 0
	}, 10*time.Second, 20*time.Millisecond, "200 new tombstones pass the threshold (50 + 10%)")
}

// CollectBatch checks that nothing holds a candidate (a reference that is
// not allowDangling). Once analyzed, the planner knows that almost every
// reference allows dangling; without the partial index of migration 007
// it ran that check as a sequential scan of reference_edges per
// candidate (23 ms each at 1M resources).
func TestHeldReferenceCheckUsesTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testURL(t)
	s, schema := openInSchema(t, url)
	_, err := s.Create(ctx, &catalog.Resource{Kind: "Database", Name: "db"})
	require.NoError(t, err)
	batch := make([]*catalog.Resource, 2000)
	for i := range batch {
		batch[i] = &catalog.Resource{Kind: "Snapshot", Name: fmt.Sprintf("s-%04d", i),
			References: []catalog.Reference{{Kind: "Database", Name: "db", OnTargetDelete: catalog.RefAllowDangling}}}
	}
	created, err := s.CreateBatch(ctx, batch)
	require.NoError(t, err)
	items := make([]map[string]any, len(created))
	for i, r := range created {
		items[i] = map[string]any{"uid": r.UID, "rv": r.ResourceVersion, "n": i}
	}
	// The shape of CollectBatch's candidate statement.
	plan := analyzedPlan(t, url, schema, []string{"resources", "reference_edges"}, `SELECT r.uid FROM jsonb_to_recordset($1::jsonb) AS i(uid text, rv bigint, n bigint, reason text)
JOIN resources r ON r.uid = i.uid
WHERE r.resource_version = i.rv AND r.phase IN ('Active', 'Scheduled') AND strpos(r.doc, '"finalizers":') = 0
  AND NOT EXISTS (SELECT 1 FROM owner_edges e WHERE e.owner_uid = r.uid)
  AND NOT EXISTS (SELECT 1 FROM reference_edges e WHERE e.target_kind = r.kind AND e.target_namespace = r.namespace
                  AND e.target_name = r.name AND e.on_target_delete <> 'allowDangling')`, items)
	require.NotContains(t, plan, "Seq Scan on reference_edges")
	require.Contains(t, plan, "reference_edges_held")
}

// Dependents reads the edges of one owner. With statistics on
// owner_edges.owner_uid (100 owners of 1,000 dependents each), the planner
// took an owner's 1 % for a sequential scan of owner_edges, on every call
// (the scan growing with the catalog); migration 007 keeps that column
// unanalyzed, so the lookup stays on the index.
func TestDependentsLookupUsesTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testURL(t)
	s, schema := openInSchema(t, url)
	var (
		owner *catalog.Resource
		err   error
	)
	for o := range 100 {
		owner, err = s.Create(ctx, &catalog.Resource{Kind: "Schedule", Name: fmt.Sprintf("o-%03d", o)})
		require.NoError(t, err)
		batch := make([]*catalog.Resource, 1000)
		for i := range batch {
			batch[i] = &catalog.Resource{Kind: "Snapshot", Name: fmt.Sprintf("s-%03d-%04d", o, i),
				Owners: []catalog.OwnerRef{{UID: owner.UID, Kind: owner.Kind, Name: owner.Name}}}
		}
		_, err = s.CreateBatch(ctx, batch)
		require.NoError(t, err)
	}
	// The statement of Dependents.
	plan := analyzedPlan(t, url, schema, []string{"resources", "owner_edges"}, `SELECT r.doc FROM owner_edges e JOIN resources r ON r.uid = e.dependent_uid
WHERE e.owner_uid = $1`, owner.UID)
	require.NotContains(t, plan, "Seq Scan on owner_edges")
}

// analyzedPlan analyzes tables of schema, then returns the EXPLAIN of
// query with args, as one string.
func analyzedPlan(t *testing.T, url, schema string, tables []string, query string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SET search_path = `+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	for _, table := range tables {
		_, err = conn.Exec(ctx, `ANALYZE `+pgx.Identifier{table}.Sanitize())
		require.NoError(t, err)
	}
	rows, err := conn.Query(ctx, `EXPLAIN `+query, args...)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return fmt.Sprint(plan)
}

// openInSchema opens a store in a fresh schema (dropped after the test).
func openInSchema(t *testing.T, url string) (catalog.Store, string) {
	t.Helper()
	schema := testSchema(t, url)
	s, err := postgres.Open(context.Background(), url, &catalog.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, schema
}

// autovacuumOffConn connects to url, closed when the test ends, and skips
// the test unless the server's autovacuum is off.
func autovacuumOffConn(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var av string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('autovacuum')`).Scan(&av))
	if av != "off" {
		t.Skip("the server's autovacuum is on: it analyzes the tables itself")
	}
	return conn
}
