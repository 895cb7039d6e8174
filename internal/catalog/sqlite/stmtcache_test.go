package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStatementCache: a connection prepares a statement once and runs it
// again from the cache; a query run again while its rows are still being
// read gets a statement of its own (both read every row); scripts of
// several statements still run; the cache stays bounded.
func TestStatementCache(t *testing.T) {
	ctx := context.Background()
	conn, err := openConnector("file:" + filepath.Join(t.TempDir(), "c.db"))
	require.NoError(t, err)
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)
	c, err := db.Conn(ctx)
	require.NoError(t, err)
	defer c.Close()
	var cc *cachingConn
	require.NoError(t, c.Raw(func(dc any) error { cc = dc.(*cachingConn); return nil }))

	_, err = c.ExecContext(ctx, `CREATE TABLE t (n INTEGER); CREATE TABLE u (n INTEGER)`)
	require.NoError(t, err, "a script of two statements")
	base := cc.prepares
	for i := range 5 {
		_, err := c.ExecContext(ctx, `INSERT INTO t (n) VALUES ($1)`, i)
		require.NoError(t, err)
	}
	require.Equal(t, base+1, cc.prepares, "prepared once, run five times")

	// The same query inside a loop over its own rows.
	const q = `SELECT n FROM t WHERE n >= $1 ORDER BY n`
	rows, err := c.QueryContext(ctx, q, 0)
	require.NoError(t, err)
	outer, inner := 0, 0
	for rows.Next() {
		var n int
		require.NoError(t, rows.Scan(&n))
		require.Equal(t, outer, n)
		outer++
		in, err := c.QueryContext(ctx, q, n)
		require.NoError(t, err)
		for in.Next() {
			inner++
		}
		require.NoError(t, in.Err())
		require.NoError(t, in.Close())
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Equal(t, 5, outer, "the outer rows were not reset by the inner runs")
	require.Equal(t, 5+4+3+2+1, inner)

	for i := range 3 * stmtCacheMax {
		_, err := c.ExecContext(ctx, fmt.Sprintf(`SELECT %d`, i))
		require.NoError(t, err)
	}
	require.LessOrEqual(t, len(cc.stmts), stmtCacheMax)
	var n int
	require.NoError(t, c.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n))
	require.Equal(t, 5, n)
}
