// Package sqlstore is the catalog.Store logic shared by the SQLite and
// PostgreSQL drivers. Both run the same SQL (numbered $N parameters work on
// both); a Backend supplies what differs: connections and transactions,
// row-locking clauses, the claim query, change notification and error
// mapping. It must not import a database driver.
package sqlstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
)

// ErrNoRows is what a Backend's Row.Scan returns when there is no row.
var ErrNoRows = errors.New("sqlstore: no rows")

// Querier runs SQL. Implementations wrap a transaction or a pool.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// ExecBatch runs statements in order; a driver may pipeline them.
	ExecBatch(ctx context.Context, stmts []Stmt) error
	// QueryBatch runs statements in order and passes the rows of each to
	// scan, with its index; a driver may pipeline them (one round trip),
	// so no statement's arguments can come from an earlier one's rows.
	// Each statement starts after the one before it has finished: one
	// that takes a lock runs before the next one reads.
	QueryBatch(ctx context.Context, stmts []Stmt, scan func(i int, rows Rows) error) error
	// InsertRows bulk-inserts rows (plain INSERT semantics, no ON
	// CONFLICT): COPY on PostgreSQL, a prepared statement on SQLite.
	InsertRows(ctx context.Context, table string, cols []string, rows [][]any) error
}

// InsertCounter is implemented by a Querier that counts the rows inserted
// into tables (PostgreSQL: to analyze them when autovacuum is off). It
// sees the INSERTs it runs itself; a statement whose inserts it cannot
// see (a data-modifying WITH) reports them with Inserted.
type InsertCounter interface {
	Inserted(table string, rows int)
}

// InsertSQL is INSERT INTO table (cols) VALUES ($1, …).
func InsertSQL(table string, cols []string) string {
	ph := make([]string, len(cols))
	for i := range cols {
		ph[i] = "$" + strconv.Itoa(i+1)
	}
	return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(ph, ", ") + ")"
}

// Stmt is one statement of an ExecBatch.
type Stmt struct {
	SQL  string
	Args []any
}

// Rows is a result set.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is a single-row result; Scan returns ErrNoRows when empty.
type Row interface {
	Scan(dest ...any) error
}

// Dialect holds the SQL that differs between databases.
type Dialect struct {
	// ForUpdate and ForShare are appended to row-locking SELECTs (empty on
	// SQLite, whose write transactions are already exclusive).
	ForUpdate string
	ForShare  string
	// SkipLocked ends the SELECT that picks rows to claim (" FOR UPDATE
	// SKIP LOCKED" on PostgreSQL, so concurrent claimers take different
	// rows; empty on SQLite).
	SkipLocked string
	// ClaimSQL leases due items. Parameters: $1 holder, $2 lease expiry,
	// $3 queue, $4 now, $5 limit. It returns workColumns, then the
	// holder each row had before the claim, unless ClaimPrevSQL is set.
	ClaimSQL string
	// ClaimPrevSQL, when set, runs in the claim's transaction before
	// ClaimSQL, with parameters $1 queue, $2 now, $3 limit, and returns the id and holder
	// of the rows ClaimSQL will take (SQLite: its RETURNING sees only the
	// new values, and its write transactions are exclusive). ClaimSQL
	// then returns only workColumns.
	ClaimPrevSQL string
	// MigrationLock, when set, runs first in the migration transaction.
	MigrationLock string
	// Collect is the JSON SQL of CollectBatch's set-based statements.
	Collect CollectDialect
}

// CollectDialect is how a database runs CollectBatch, one of two ways:
// chained (ChainItems: data-modifying statements in WITH, PostgreSQL) or
// staged (Stage: a table of the writer connection, SQLite). Every
// function takes SQL expressions (placeholders, columns) and returns one.
type CollectDialect struct {
	// ChainItems, when set, says that the database runs data-modifying
	// statements in WITH (PostgreSQL): CollectBatch is then one statement
	// that deletes the resources that can go and writes everything else
	// from the rows the DELETE returns (each candidate is found once and
	// no row is locked before it is deleted). ChainItems is its FROM item
	// aliased i over four array parameters of the same length: $1 the
	// UIDs (text), $2 their resourceVersions (integer), $3 the reasons
	// (text), $4 the tombstone documents (text, built here: PostgreSQL's
	// json_build_object cost ~2.7 µs per row, a tenth of the statement),
	// with the columns uid, rv, reason, tomb and n, the position in the
	// arrays (arrays, not JSON: PostgreSQL's jsonb_to_recordset took
	// ~8 ms per 1,000 items, unnest 0.2 ms).
	ChainItems string
	// Stage, when set (and ChainItems is not), are statements without
	// parameters that make StageTable exist and empty: a table the
	// connection keeps (SQLite: a TEMP table of its one writer
	// connection), with the columns n (0, 1, … in the caller's order; the
	// rowid on SQLite), uid, reason, kind, namespace, name and phase. One
	// statement picks the items that can go into it, reading the list
	// through Items; the write statements then read the stage table.
	Stage      []string
	StageTable string
	// Items is a FROM item aliased i that expands param, a JSON array of
	// {"uid", "rv", "n", "reason"} objects, into the columns
	// uid (text), rv (integer), n (integer) and reason (text).
	Items func(param string) string
	// NoFinalizers is a condition on r.doc: the resource has no finalizer.
	// It may be conservative (false for some resources without one: they
	// then take the collector's step-by-step path), never the reverse.
	NoFinalizers string
	// In is the condition "col is one of the values of the query sub"
	// (one column). Nil: col IN (sub).
	In func(col, sub string) string
	// Tombstone is the catalog.Tombstone document, as JSON text, of the
	// row g (columns uid, kind, namespace, name and reason), purged at ts
	// by actor (the staged CollectBatch).
	Tombstone func(g, ts, actor string) string
}

// Backend is one database.
type Backend interface {
	Dialect() Dialect
	// Reader runs single statements outside a write transaction.
	Reader() Querier
	// ReadTx runs fn in a read-only transaction (one snapshot).
	ReadTx(ctx context.Context, fn func(Querier) error) error
	// WriteTx runs fn in a write transaction, committing when fn returns
	// nil. Writers that assign resourceVersions are serialized by the
	// version counter row (see nextVersions).
	WriteTx(ctx context.Context, fn func(Querier) error) error
	// Notify returns the statements that announce the changes of the
	// running write transaction, at its commit: PostgreSQL's pg_notify
	// of the version counter, which holds the transaction's last version
	// (it holds the counter's lock). None where the driver wakes
	// subscribers itself (SQLite). Writers run them with their last
	// statements, in the same round trip.
	Notify() []Stmt
	// Listen returns a Listener whose Wait returns when a change may have
	// been committed (by this or another process).
	Listen(ctx context.Context) (Listener, error)
	// NotifyWake runs inside a write transaction; other replicas'
	// ListenWake receive topic if it commits. A driver whose replicas
	// cannot be reached this way (SQLite) does nothing: the Store itself
	// wakes this process's subscribers after the commit.
	NotifyWake(ctx context.Context, q Querier, topic string) error
	// ListenWake listens for other replicas' NotifyWake; nil (and no
	// error) when the driver has no such channel.
	ListenWake(ctx context.Context) (WakeListener, error)
	// MapError maps a driver error to a catalog sentinel (or returns it).
	MapError(err error) error
	Close() error
}

// Listener wakes a change-feed subscriber.
type Listener interface {
	Wait(ctx context.Context) error
	Close() error
}

func (cd CollectDialect) in(col, sub string) string {
	if cd.In == nil {
		return col + ` IN (` + sub + `)`
	}
	return cd.In(col, sub)
}
