package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/postgres"
)

// TestIdentifiersOrderByBytesUnderALocale: in a database whose default
// collation is a language's (ICU en-US), List still orders kinds,
// namespaces and names by their bytes, as SQLite and Go do (migration
// 008). Under en-US, "_c" < "a" < "B"; by bytes, "B" < "_c" < "a".
func TestIdentifiersOrderByBytesUnderALocale(t *testing.T) {
	base := testURL(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	db := "lethe_test_icu_" + hex.EncodeToString(b)
	_, err = admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{db}.Sanitize()+
		` TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+pgx.Identifier{db}.Sanitize()+` WITH (FORCE)`)
		require.NoError(t, err)
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + db

	// The database's own order is the locale's.
	conn, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	var localeOrder []string
	rows, err := conn.Query(ctx, `SELECT x FROM unnest(ARRAY['a', 'B', '_c']) AS x ORDER BY x`)
	require.NoError(t, err)
	localeOrder, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	require.Equal(t, []string{"_c", "a", "B"}, localeOrder, "the test database sorts by the en-US locale")

	s, err := postgres.Open(ctx, u.String(), &catalog.Config{})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	actx := catalog.WithActor(ctx, "test")
	for _, name := range []string{"a", "B", "_c"} {
		_, err := s.Create(actx, &catalog.Resource{Kind: "Snapshot", Namespace: "ns", Name: name})
		require.NoError(t, err)
		_, err = s.Create(actx, &catalog.Resource{Kind: "Snapshot", Namespace: name, Name: "x"})
		require.NoError(t, err)
	}
	page, err := s.List(actx, catalog.ListOptions{Kind: "Snapshot", Namespace: "ns"})
	require.NoError(t, err)
	var names []string
	for _, r := range page.Items {
		names = append(names, r.Name)
	}
	require.Equal(t, []string{"B", "_c", "a"}, names, "names by bytes")
	page, err = s.List(actx, catalog.ListOptions{Kind: "Snapshot"})
	require.NoError(t, err)
	var namespaces []string
	for _, r := range page.Items {
		if r.Name == "x" {
			namespaces = append(namespaces, r.Namespace)
		}
	}
	require.Equal(t, []string{"B", "_c", "a"}, namespaces, "namespaces by bytes")
}
