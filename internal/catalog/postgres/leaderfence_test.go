package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/catalog/postgres"
)

// TestLeaderFenceHoldsTheLeaseUntilTheWriteCommits: the leader term is
// checked inside the write's own transaction, and the check locks the
// lease row: a takeover cannot commit between the check and the write. A
// write of term 1 is held, after its check, on the version counter (the
// test holds its lock); another replica, whose clock says term 1 lapsed,
// asks for the lease meanwhile. It waits for the write, which commits in
// term 1, and only then begins term 2.
func TestLeaderFenceHoldsTheLeaseUntilTheWriteCommits(t *testing.T) {
	t.Parallel()
	ctx := catalog.WithActor(context.Background(), "tester")
	url := testURL(t)
	schema := testSchema(t, url)
	open := func(now func() time.Time) catalog.Store {
		s, err := postgres.Open(context.Background(), url, &catalog.Config{Schema: schema, Now: now})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}
	a := open(catalogtest.NewClock(catalogtest.Epoch).Now)
	b := open(catalogtest.NewClock(catalogtest.Epoch.Add(time.Hour)).Now)
	const lease = "server"
	l, err := a.AcquireLeader(ctx, lease, "a", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(1), l.Term)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, `SELECT value FROM `+pgx.Identifier{schema, "lethe_version"}.Sanitize()+` WHERE id = 1 FOR UPDATE`)
	require.NoError(t, err)
	// waiting reports whether a session waits to lock a row of table in
	// this test's schema (it holds the row's tuple lock while it waits
	// for the transaction that has the row).
	waiting := func(table string) bool {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace ns ON ns.oid = c.relnamespace
WHERE l.locktype = 'tuple' AND ns.nspname = $1 AND c.relname = $2 AND l.pid <> pg_backend_pid()`, schema, table).Scan(&n))
		return n > 0
	}

	wrote := make(chan error, 1)
	go func() {
		fenced := catalog.WithLeaderFence(catalog.WithActor(ctx, "ttl"), &catalog.LeaderFence{Name: lease, Holder: "a", Term: 1})
		_, err := a.Create(fenced, &catalog.Resource{Kind: "Backup", Name: "in-flight"})
		wrote <- err
	}()
	require.Eventually(t, func() bool { return waiting("lethe_version") }, 20*time.Second, 5*time.Millisecond,
		"the fenced write never reached the version counter")

	took := make(chan *catalog.LeaderLease, 1)
	go func() {
		l, err := b.AcquireLeader(ctx, lease, "b", 10*time.Second)
		if err != nil {
			l = nil
		}
		took <- l
	}()
	for !waiting("leader_leases") {
		select {
		case l := <-took:
			t.Fatalf("the takeover committed (%+v) while a write checked in term 1 had not", l)
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-wrote, "the write was checked while term 1 was live")
	got := <-took
	require.NotNil(t, got)
	require.Equal(t, "b", got.Holder)
	require.Equal(t, int64(2), got.Term)

	// The audit log has the write before the new term.
	audit, err := a.ListAudit(ctx, catalog.AuditFilter{})
	require.NoError(t, err)
	var order []string
	for _, e := range audit {
		switch {
		case e.Kind == "Backup":
			order = append(order, e.Actor)
		case e.Action == catalog.AuditLeaderElected:
			var d struct{ Term int64 }
			require.NoError(t, json.Unmarshal(e.Details, &d))
			order = append(order, fmt.Sprintf("elected %d", d.Term))
		}
	}
	require.Equal(t, []string{"elected 1", "ttl (leader term 1)", "elected 2"}, order)
}
