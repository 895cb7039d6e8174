// Package postgres is the catalog driver for PostgreSQL, shared by several
// Lethe replicas: pgx v5 with pgxpool.
//
//   - Claims lease work with a FOR UPDATE SKIP LOCKED CTE followed by
//     UPDATE … RETURNING, so concurrent claimers never block on or double
//     claim an item.
//   - Versions: every resource write first locks the one-row lethe_version
//     counter (UPDATE … RETURNING; the batch purge takes it with SELECT …
//     FOR UPDATE and advances it at the end of its one statement). The row
//     lock is held until commit, so resource writers are serialized while
//     they assign versions and commit in version order: a subscriber that
//     has read up to N can never later find a committed change with a
//     version ≤ N. (This is the transaction-level advisory lock pattern,
//     with the lock on the counter itself.) The statements after the lock
//     are pipelined (pgx.Batch): the lock is held for one round trip and
//     the commit, not one per statement.
//   - Change feed: the writing transaction runs pg_notify(channel,
//     version), with its last statements, delivered at commit. A subscriber LISTENs on a dedicated
//     connection (one per subscription, outside the pool) before reading
//     the backlog, and on each notification (or every 10×PollInterval,
//     as a safety net) re-reads the changes table after its last version.
//     The notification carries only the version.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// Migrations returns the embedded schema migrations.
func Migrations() ([]sqlstore.Migration, error) {
	return sqlstore.LoadMigrations(migrationsFS, "migrations")
}

// Open connects to the PostgreSQL database at url (postgres://…), in
// cfg.Schema when set (created if missing), and applies pending
// migrations. It refuses a database whose schema is newer than this binary
// with catalog.ErrSchemaTooNew.
func Open(ctx context.Context, url string, cfg *catalog.Config) (catalog.Store, error) {
	cfg = cfg.WithDefaults()
	b, err := open(ctx, url, cfg)
	if err != nil {
		return nil, err
	}
	return sqlstore.New(b, cfg), nil
}

// sessionParams are the settings of Lethe's sessions, unless the
// connection string sets them. Lethe's statements are lookups and
// set-based writes of at most a batch. A parallel plan started worker
// processes on every call: Dependents at 1M resources (owner_uid is left
// unanalyzed, so an owner is estimated at 5,000 edges) ran as a Gather of
// two workers, each costing the server more CPU than the lookup itself.
// JIT compilation, whose cost comes back on every execution, is off for
// the same reason: at 1M resources the largest plans (Referrers of a
// target held by 100k resources, the scan by phase) were estimated at 70-
// 80% of the default jit_above_cost, one misestimate away from it.
var sessionParams = map[string]string{
	"jit":                             "off",
	"max_parallel_workers_per_gather": "0",
}

// open connects and migrates: Open without the store on top.
func open(ctx context.Context, url string, cfg *catalog.Config) (*backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, parseError(url, err)
	}
	pcfg.MaxConns = int32(cfg.MaxConns) //nolint:gosec // Config.Validate keeps it within int32
	for k, v := range sessionParams {
		if _, set := pcfg.ConnConfig.RuntimeParams[k]; !set {
			pcfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	channel := "lethe_changes"
	if cfg.Schema != "" {
		if err := createSchema(ctx, pcfg.ConnConfig.Copy(), cfg.Schema); err != nil {
			return nil, err
		}
		pcfg.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
		channel = "lethe_changes_" + cfg.Schema
		if len(channel) > 63 {
			h := fnv.New64a()
			h.Write([]byte(cfg.Schema))
			channel = "lethe_changes_" + strconv.FormatUint(h.Sum64(), 16)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("catalog: postgres: %s", pgErrorText(err))
	}
	b := &backend{pool: pool, cfg: cfg, channel: channel, wakeChannel: wakeChannel(cfg.Schema)}
	if _, err := sqlstore.Migrate(ctx, b, ms, cfg.Now().UnixNano()); err != nil {
		pool.Close()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
			return nil, fmt.Errorf("catalog: postgres: the catalog schema needs migrating and this role may not change it (%s): run 'lethe migrate' as the role that owns the catalog (docs/postgres.md)",
				pgErrorText(err))
		}
		return nil, fmt.Errorf("catalog: postgres: %w", b.MapError(err))
	}
	off, err := autovacuumOff(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("catalog: postgres: %w", b.MapError(err))
	}
	if off {
		b.stats = newStatsKeeper()
	}
	return b, nil
}

func createSchema(ctx context.Context, cc *pgx.ConnConfig, schema string) error {
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("catalog: postgres: %s", pgErrorText(err))
	}
	defer conn.Close(ctx)
	// CREATE SCHEMA IF NOT EXISTS needs the CREATE right on the database
	// even when the schema exists; the runtime role (docs/postgres.md) has
	// no such right, so look first.
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return fmt.Errorf("catalog: postgres: look up schema %s: %s", schema, pgErrorText(err))
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
		var pe *pgconn.PgError
		// Two processes creating the schema at once: one loses the race.
		if errors.As(err, &pe) && pe.Code == "23505" {
			return nil
		}
		return fmt.Errorf("catalog: postgres: create schema %s: %s", schema, pgErrorText(err))
	}
	return nil
}

type backend struct {
	pool        *pgxpool.Pool
	cfg         *catalog.Config
	channel     string
	wakeChannel string
	// stats is set when the server's autovacuum is off (see statsKeeper).
	stats *statsKeeper
	bg    sync.WaitGroup // background ANALYZEs
}

// wakeChannel is the NOTIFY channel of wake-up hints (work enqueued or
// released, a leader resigned), one per catalog schema.
func wakeChannel(schema string) string {
	if schema == "" {
		return "lethe_wake"
	}
	ch := "lethe_wake_" + schema
	if len(ch) > 63 {
		h := fnv.New64a()
		h.Write([]byte(schema))
		ch = "lethe_wake_" + strconv.FormatUint(h.Sum64(), 16)
	}
	return ch
}

func (b *backend) NotifyWake(ctx context.Context, q sqlstore.Querier, topic string) error {
	_, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, b.wakeChannel, topic)
	return err
}

// ListenWake LISTENs on a dedicated connection, outside the pool.
func (b *backend) ListenWake(ctx context.Context) (sqlstore.WakeListener, error) {
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{b.wakeChannel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return wakeListener{conn}, nil
}

type wakeListener struct{ conn *pgx.Conn }

func (l wakeListener) Next(ctx context.Context) (string, error) {
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		return "", err
	}
	return n.Payload, nil
}

func (l wakeListener) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return l.conn.Close(ctx)
}

func (b *backend) Dialect() sqlstore.Dialect {
	return sqlstore.Dialect{
		ForUpdate: " FOR UPDATE",
		ForShare:  " FOR SHARE",
		// claims of the retry queue and the outbox
		SkipLocked: " FOR UPDATE SKIP LOCKED",
		ClaimSQL: `WITH picked AS (
    SELECT id, holder AS prev_holder FROM work_items
    WHERE queue = $3 AND available_at <= $4
    ORDER BY available_at, id
    LIMIT $5
    FOR UPDATE SKIP LOCKED
)
UPDATE work_items w SET holder = $1, lease_expires_at = $2, available_at = $2, attempts = w.attempts + 1,
  epoch = w.epoch + 1
FROM picked WHERE w.id = picked.id
RETURNING w.id, w.queue, w.key, w.payload, w.run_at, w.holder, w.lease_expires_at, w.attempts, w.last_error, w.created_at, w.epoch, picked.prev_holder`,
		Collect:       collectDialect(),
		MigrationLock: `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.lethe_migrations'))`,
	}
}

// collectDialect is CollectBatch's SQL: the list parameter as jsonb
// records, the documents left as text (never parsed).
func collectDialect() sqlstore.CollectDialect {
	return sqlstore.CollectDialect{
		ChainItems: `unnest(CAST($1 AS TEXT[]), CAST($2 AS BIGINT[]), CAST($3 AS TEXT[]), CAST($4 AS TEXT[])) WITH ORDINALITY AS i(uid, rv, reason, tomb, n)`,
		// A text search, not a parse: a document with a finalizer always
		// has the member; one without may match elsewhere (a label named
		// so), which only sends it the slow way.
		NoFinalizers: `strpos(r.doc, '"finalizers":') = 0`,
		// = ANY(ARRAY(...)): an index scan whatever the statistics say.
		// IN (SELECT ...) over a set-returning function (estimated at 100
		// rows) was planned as a sequential scan of owner_edges on a
		// catalog not analyzed yet: 540 ms per batch of 1,000 at 1M
		// resources.
		In: func(col, sub string) string { return col + ` = ANY(ARRAY(` + sub + `))` },
		Tombstone: func(g, ts, actor string) string {
			return `json_build_object('key', json_build_object('kind', ` + g + `.kind, 'namespace', ` + g + `.namespace, 'name', ` + g + `.name), 'uid', ` + g + `.uid, 'purgedAt', ` + ts +
				`, 'actor', ` + actor + `, 'reason', NULLIF(` + g + `.reason, ''))::text`
		},
	}
}

func (b *backend) Reader() sqlstore.Querier { return querier{db: b.pool} }

func (b *backend) ReadTx(ctx context.Context, fn func(sqlstore.Querier) error) error {
	return pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error { return fn(querier{db: tx}) })
}

func (b *backend) WriteTx(ctx context.Context, fn func(sqlstore.Querier) error) error {
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return fn(querier{db: tx, stats: b.stats}) }); err != nil {
		return err
	}
	b.analyze(ctx)
	return nil
}

func (b *backend) Notify() []sqlstore.Stmt {
	return []sqlstore.Stmt{{SQL: `SELECT pg_notify($1, value::text) FROM lethe_version WHERE id = 1`, Args: []any{b.channel}}}
}

func (b *backend) Listen(ctx context.Context) (sqlstore.Listener, error) {
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{b.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return &listener{conn: conn, poll: b.cfg.PollInterval}, nil
}

func (b *backend) MapError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return catalog.ErrNotFound
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "23505": // unique_violation
		return fmt.Errorf("%w (%s)", catalog.ErrAlreadyExists, pe.Message)
	case "23503", "23514", "23502", "22P02": // foreign key, check, not null, invalid text
		return fmt.Errorf("%w (%s)", catalog.ErrInvalid, pe.Message)
	case "40001", "40P01": // serialization failure, deadlock
		return fmt.Errorf("%w (%s)", catalog.ErrConflict, pe.Message)
	case "53100": // disk_full
		return fmt.Errorf("catalog: postgres: %w (%s)", catalog.ErrDiskFull, pe.Message)
	}
	return fmt.Errorf("catalog: postgres: %s", pgErrorText(err))
}

// parseError explains a connection string pgx refused. pgx's own text
// repeats the string with passwords masked on a best-effort basis only, so
// the string shown is catalog.RedactURL's and pgx's is cut off.
func parseError(url string, err error) error {
	text := err.Error()
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		// "cannot parse `<string>`: <reason>"
		if i := strings.LastIndex(text, "`: "); i >= 0 {
			text = text[i+len("`: "):]
		} else {
			text = "pgx cannot parse it"
		}
	}
	return fmt.Errorf("catalog: postgres: bad connection string %q: %s", catalog.RedactURL(url), text)
}

func pgErrorText(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s (SQLSTATE %s)", pe.Message, pe.Code)
	}
	return err.Error()
}

func (b *backend) Close() error {
	b.bg.Wait()
	b.pool.Close()
	return nil
}

type listener struct {
	conn *pgx.Conn
	poll time.Duration
}

// Wait returns on a notification, or after 10×poll as a safety net.
func (l *listener) Wait(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, l.poll*10)
	defer cancel()
	_, err := l.conn.WaitForNotification(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil // poll tick
	}
	return err
}

func (l *listener) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return l.conn.Close(ctx)
}

type pgxtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error)
}

type querier struct {
	db    pgxtx
	stats *statsKeeper // counts inserted rows (nil: no counting)
}

func (q querier) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := q.db.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (q querier) Query(ctx context.Context, sql string, args ...any) (sqlstore.Rows, error) {
	rows, err := q.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgRows{rows}, nil
}

func (q querier) QueryRow(ctx context.Context, sql string, args ...any) sqlstore.Row {
	return pgRow{q.db.QueryRow(ctx, sql, args...)}
}

// Inserted implements sqlstore.InsertCounter.
func (q querier) Inserted(table string, rows int) { q.stats.inserted(table, rows) }

// ExecBatch pipelines the statements in one round trip (pgx.Batch).
func (q querier) ExecBatch(ctx context.Context, stmts []sqlstore.Stmt) error {
	if len(stmts) == 0 {
		return nil
	}
	if len(stmts) == 1 {
		tag, err := q.db.Exec(ctx, stmts[0].SQL, stmts[0].Args...)
		if err == nil {
			q.stats.insertedBy(stmts[0].SQL, tag.RowsAffected())
		}
		return err
	}
	return q.QueryBatch(ctx, stmts, func(int, sqlstore.Rows) error { return nil })
}

// QueryBatch pipelines the statements in one round trip (pgx.Batch).
func (q querier) QueryBatch(ctx context.Context, stmts []sqlstore.Stmt, scan func(int, sqlstore.Rows) error) error {
	var batch pgx.Batch
	for _, s := range stmts {
		batch.Queue(s.SQL, s.Args...)
	}
	br := q.db.SendBatch(ctx, &batch)
	for i, s := range stmts {
		rows, err := br.Query()
		if err == nil {
			err = scan(i, pgRows{rows})
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			_ = br.Close()
			return err
		}
		q.stats.insertedBy(s.SQL, rows.CommandTag().RowsAffected())
	}
	return br.Close()
}

// InsertRows uses COPY for large inputs, a pipelined batch of INSERTs
// for small ones (COPY costs an extra round trip).
func (q querier) InsertRows(ctx context.Context, table string, cols []string, rows [][]any) error {
	if len(rows) < 16 {
		sql := sqlstore.InsertSQL(table, cols)
		stmts := make([]sqlstore.Stmt, len(rows))
		for i, r := range rows {
			stmts[i] = sqlstore.Stmt{SQL: sql, Args: r}
		}
		return q.ExecBatch(ctx, stmts) // counted there, by statement
	}
	if _, err := q.db.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows)); err != nil {
		return err
	}
	q.stats.inserted(table, len(rows))
	return nil
}

type pgRows struct{ pgx.Rows }

func (r pgRows) Close() { r.Rows.Close() }

type pgRow struct{ pgx.Row }

func (r pgRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sqlstore.ErrNoRows
	}
	return err
}
