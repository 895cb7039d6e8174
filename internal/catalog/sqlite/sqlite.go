// Package sqlite is the embedded catalog driver: modernc.org/sqlite (pure
// Go), WAL mode, one writer connection (every write transaction is BEGIN
// IMMEDIATE on it, so writes are serialized in-process, and across
// processes by SQLite's lock with busy_timeout), a separate read pool,
// and foreign keys on. The change feed is the changes table, polled every
// Config.PollInterval and woken at once by this process's own commits;
// with Config.FileWake also by other processes' (the file is watched), and
// the poll is then a safety net every 10×PollInterval.
//
// Durability: synchronous=NORMAL in WAL mode survives a process crash
// (kill -9) without losing committed transactions; a power loss may lose
// the last few.
//
// The audit log is append-only against Lethe's own code (triggers refuse
// UPDATE and DELETE), not against the host: SQLite has no roles, and anyone
// who can write the file can drop the triggers or rewrite the log.
// docs/postgres.md gives PostgreSQL's least-privilege setup.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// Migrations returns the embedded schema migrations.
func Migrations() ([]sqlstore.Migration, error) {
	return sqlstore.LoadMigrations(migrationsFS, "migrations")
}

// Open opens (creating if needed) the catalog in the SQLite file at path
// and applies pending migrations. It refuses a database whose schema is
// newer than this binary with catalog.ErrSchemaTooNew.
func Open(ctx context.Context, path string, cfg *catalog.Config) (catalog.Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("catalog: sqlite: empty database path")
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("catalog: sqlite: database path %q must not contain ? or #", path)
	}
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	if err := prepareFile(path, cfg.Logger); err != nil {
		return nil, err
	}
	busy := cfg.BusyTimeout.Milliseconds()
	common := url.Values{}
	common.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy))
	common.Add("_pragma", "foreign_keys(1)")
	wq := url.Values{"_txlock": {"immediate"}}
	// busy_timeout comes first so that switching to WAL waits for another
	// process instead of failing with SQLITE_BUSY.
	wq["_pragma"] = append(append([]string{}, common["_pragma"]...),
		"journal_mode(WAL)", "synchronous(NORMAL)", fmt.Sprintf("cache_size(-%d)", cfg.SQLiteCacheKiB), // the writer's page cache (64 MiB by default)
		// Checkpoint when the log reaches 10,000 pages (40 MiB), not
		// SQLite's 1,000: a checkpoint runs inside the COMMIT that crosses
		// the mark and ends with an fsync of the database file, which the
		// writer waits for. Ten times fewer of them made the batch purge
		// of a cascade about 15% faster; the cost is a longer log for
		// readers to search and up to 40 MiB more on disk.
		"wal_autocheckpoint(10000)")
	wc, err := openConnector("file:" + path + "?" + wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("catalog: sqlite: %w", err)
	}
	writer := sql.OpenDB(wc)
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	b := &backend{writer: writer, cfg: cfg, bc: sqlstore.NewBroadcast(), path: path}
	if _, err := sqlstore.Migrate(ctx, b, ms, cfg.Now().UnixNano()); err != nil {
		writer.Close()
		return nil, fmt.Errorf("catalog: sqlite %s: %w", path, b.MapError(err))
	}
	rq := url.Values{"_pragma": append(common["_pragma"], "query_only(1)")}
	rc, err := openConnector("file:" + path + "?" + rq.Encode())
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("catalog: sqlite: %w", err)
	}
	reader := sql.OpenDB(rc)
	reader.SetMaxOpenConns(cfg.MaxConns)
	reader.SetMaxIdleConns(cfg.MaxConns)
	b.reader = reader
	return sqlstore.New(b, cfg), nil
}

type backend struct {
	writer *sql.DB // one connection
	reader *sql.DB
	cfg    *catalog.Config
	bc     *sqlstore.Broadcast
	path   string
	fw     fileWake
}

func (b *backend) Dialect() sqlstore.Dialect {
	return sqlstore.Dialect{
		ClaimSQL: `UPDATE work_items SET holder = $1, lease_expires_at = $2, available_at = $2, attempts = attempts + 1,
  epoch = epoch + 1
WHERE id IN (SELECT id FROM work_items
             WHERE queue = $3 AND available_at <= $4
             ORDER BY available_at, id LIMIT $5)
RETURNING ` + sqlstore.WorkColumns,
		Collect: sqlstore.CollectDialect{
			// jsonb_each parses the list once into SQLite's binary JSON,
			// whose elements json_extract reads without parsing them again
			// (json_each hands each element back as text): half the time.
			Items: func(p string) string {
				return `(SELECT json_extract(value, '$.uid') AS uid, json_extract(value, '$.rv') AS rv, json_extract(value, '$.n') AS n,
  json_extract(value, '$.reason') AS reason FROM jsonb_each(` + p + `)) AS i`
			},
			// The items that can go are picked once per batch into a TEMP
			// table of the writer connection, which the write statements
			// read instead of parsing the list again. n is the rowid, so
			// they read the items in order without sorting them.
			Stage: []string{
				`CREATE TEMP TABLE IF NOT EXISTS collect_items (n INTEGER PRIMARY KEY, uid TEXT NOT NULL, reason TEXT NOT NULL,
  kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, phase TEXT NOT NULL)`,
				`DELETE FROM temp.collect_items`, // no WHERE: SQLite's truncate optimization
			},
			StageTable: `temp.collect_items`,
			// A text search, not a parse: a document with a finalizer
			// always has the member; one without may match elsewhere
			// (a label named so), which only sends it the slow way.
			NoFinalizers: `instr(r.doc, '"finalizers":') = 0`,
			Tombstone: func(g, ts, actor string) string {
				return `json_object('key', json_object('kind', ` + g + `.kind, 'namespace', ` + g + `.namespace, 'name', ` + g + `.name), 'uid', ` + g + `.uid, 'purgedAt', ` + ts +
					`, 'actor', ` + actor + `, 'reason', NULLIF(` + g + `.reason, ''))`
			},
		},
		ClaimPrevSQL: `SELECT id, holder FROM work_items
WHERE queue = $1 AND available_at <= $2
ORDER BY available_at, id LIMIT $3`,
	}
}

func (b *backend) Reader() sqlstore.Querier { return querier{b.reader} }

func (b *backend) ReadTx(ctx context.Context, fn func(sqlstore.Querier) error) error {
	tx, err := b.reader.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	return fn(querier{tx})
}

func (b *backend) WriteTx(ctx context.Context, fn func(sqlstore.Querier) error) error {
	tx, err := b.writer.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return err
	}
	if err := fn(querier{tx}); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	b.bc.Signal()
	return nil
}

func (b *backend) Notify() []sqlstore.Stmt { return nil }

// NotifyWake does nothing: SQLite has no channel to other processes; the
// Store wakes this process's subscribers itself, and other processes on
// the same file find new work by polling.
func (b *backend) NotifyWake(context.Context, sqlstore.Querier, string) error { return nil }

func (b *backend) ListenWake(context.Context) (sqlstore.WakeListener, error) { return nil, nil }

// Listen wakes on this process's commits and polls every PollInterval;
// with Config.FileWake, it also wakes when the file changes on disk, and
// polls every 10×PollInterval as a safety net.
func (b *backend) Listen(context.Context) (sqlstore.Listener, error) {
	poll := b.cfg.PollInterval
	if b.cfg.FileWake && b.fw.start(b.path, b.bc, func(err error) {
		b.cfg.Logger.Debug("catalog: sqlite: cannot watch the database file; polling", "error", err)
	}) {
		poll *= 10
	}
	return &listener{bc: b.bc, next: b.bc.C(), tick: time.NewTicker(poll)}, nil
}

func (b *backend) MapError(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		if errors.Is(err, sql.ErrNoRows) {
			return catalog.ErrNotFound
		}
		return err
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%w (%s)", catalog.ErrAlreadyExists, se.Error())
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY, sqlite3.SQLITE_CONSTRAINT_CHECK, sqlite3.SQLITE_CONSTRAINT_NOTNULL:
		return fmt.Errorf("%w (%s)", catalog.ErrInvalid, se.Error())
	}
	if se.Code()&0xff == sqlite3.SQLITE_FULL {
		return fmt.Errorf("catalog: sqlite %s: %w (%s)", b.path, catalog.ErrDiskFull, se.Error())
	}
	// Do not leak the driver's type: keep the message only.
	return fmt.Errorf("catalog: sqlite: %s", se.Error())
}

func (b *backend) Close() error {
	errs := []error{b.fw.close()}
	if b.reader != nil {
		errs = append(errs, b.reader.Close())
	}
	errs = append(errs, b.writer.Close())
	return errors.Join(errs...)
}

// listener wakes on this process's commits or on each poll tick (for
// other processes' commits).
type listener struct {
	bc   *sqlstore.Broadcast
	next <-chan struct{}
	tick *time.Ticker
}

func (l *listener) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-l.next:
	case <-l.tick.C:
	}
	l.next = l.bc.C()
	return nil
}

func (l *listener) Close() error {
	l.tick.Stop()
	return nil
}

type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

type querier struct{ db dbtx }

func (q querier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q querier) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (q querier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return sqlRow{q.db.QueryRowContext(ctx, query, args...)}
}

// ExecBatch runs the statements in order (each connection keeps its
// prepared statements: see cachingConn).
func (q querier) ExecBatch(ctx context.Context, stmts []sqlstore.Stmt) error {
	for _, s := range stmts {
		if _, err := q.db.ExecContext(ctx, s.SQL, s.Args...); err != nil {
			return err
		}
	}
	return nil
}

// QueryBatch runs the statements one after the other.
func (q querier) QueryBatch(ctx context.Context, stmts []sqlstore.Stmt, scan func(int, sqlstore.Rows) error) error {
	for i, s := range stmts {
		rows, err := q.Query(ctx, s.SQL, s.Args...)
		if err != nil {
			return err
		}
		err = scan(i, rows)
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// InsertRows runs one prepared INSERT per row.
func (q querier) InsertRows(ctx context.Context, table string, cols []string, rows [][]any) error {
	p, err := q.db.PrepareContext(ctx, sqlstore.InsertSQL(table, cols))
	if err != nil {
		return err
	}
	defer p.Close()
	for _, r := range rows {
		if _, err := p.ExecContext(ctx, r...); err != nil {
			return err
		}
	}
	return nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

type sqlRow struct{ *sql.Row }

func (r sqlRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return sqlstore.ErrNoRows
	}
	return err
}
