package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/sqlite"
)

// TestMigration005KeepsTheGraph builds a catalog at schema 004 from the
// embedded migrations, with an owner edge, a reference edge and a
// tombstone, then opens it: migration 005 rebuilds the three tables
// (WITHOUT ROWID, no foreign keys) and every row must survive.
func TestMigration005KeepsTheGraph(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	ms, err := sqlite.Migrations()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ms), 5)
	require.Equal(t, "lean_graph_tables", ms[4].Name)

	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(1)")
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE lethe_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`)
	require.NoError(t, err)
	for _, m := range ms[:4] {
		_, err = db.Exec(m.SQL)
		require.NoError(t, err, m.Name)
		_, err = db.Exec(`INSERT INTO lethe_migrations VALUES (?, ?, 0)`, m.Version, m.Name)
		require.NoError(t, err)
	}
	owner := &catalog.Resource{UID: "u-owner", Kind: "Backup", Namespace: "prod", Name: "b1", Phase: catalog.PhaseActive, ResourceVersion: 1}
	dep := &catalog.Resource{UID: "u-dep", Kind: "Snapshot", Namespace: "prod", Name: "s1", Phase: catalog.PhaseActive, ResourceVersion: 2,
		Owners:     []catalog.OwnerRef{{UID: "u-owner", Kind: "Backup", Name: "b1", BlockOwnerDeletion: true}},
		References: []catalog.Reference{{Kind: "Database", Namespace: "prod", Name: "orders", OnTargetDelete: catalog.RefBlock}}}
	for _, r := range []*catalog.Resource{owner, dep} {
		doc, err := json.Marshal(r)
		require.NoError(t, err)
		_, err = db.Exec(`INSERT INTO resources (uid, kind, namespace, name, phase, resource_version, doc) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			r.UID, r.Kind, r.Namespace, r.Name, string(r.Phase), r.ResourceVersion, string(doc))
		require.NoError(t, err)
	}
	_, err = db.Exec(`UPDATE lethe_version SET value = 2`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO owner_edges VALUES ('u-owner', 'u-dep', 1)`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO reference_edges VALUES ('Database', 'prod', 'orders', 'u-dep', 'block')`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO tombstones VALUES ('u-gone', 'Snapshot', 'prod', 's0', 7,
  '{"key":{"kind":"Snapshot","namespace":"prod","name":"s0"},"uid":"u-gone","purgedAt":"2026-01-02T03:04:05Z","actor":"ops"}')`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	s, err := sqlite.Open(ctx, path, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	deps, err := s.Dependents(ctx, "u-owner")
	require.NoError(t, err)
	require.Len(t, deps, 1)
	require.Equal(t, "u-dep", deps[0].UID)
	refs, err := s.Referrers(ctx, catalog.Key{Kind: "Database", Namespace: "prod", Name: "orders"})
	require.NoError(t, err)
	require.Len(t, refs, 1)
	require.Equal(t, "u-dep", refs[0].UID)
	ts, err := s.GetTombstone(ctx, catalog.Key{Kind: "Snapshot", Namespace: "prod", Name: "s0"})
	require.NoError(t, err)
	require.Equal(t, "u-gone", ts.UID)
	require.Equal(t, "ops", ts.Actor)

	db, err = sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	for _, table := range []string{"owner_edges", "reference_edges", "tombstones"} {
		var ddl string
		require.NoError(t, db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&ddl))
		require.True(t, strings.HasSuffix(strings.TrimSpace(ddl), "WITHOUT ROWID"), "%s: %s", table, ddl)
		var fks int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pragma_foreign_key_list(?)`, table).Scan(&fks))
		require.Zero(t, fks, "%s keeps a foreign key", table)
	}
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE '%\_005' ESCAPE '\'`).Scan(&n))
	require.Zero(t, n, "a rebuilt table kept its temporary name")
}
