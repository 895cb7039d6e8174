package postgres

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// statsKeeper runs ANALYZE on the graph tables as autovacuum would, for a
// server whose autovacuum is off (it is on by default): without
// statistics the planner assumes 200 distinct values per column, so
// CollectBatch's edge deletes (dependent_uid IN (the batch)) were
// estimated at half of owner_edges and ran as a sequential scan of it,
// every batch: 540 ms per 1,000 resources at 1M resources, the cost
// growing with the catalog. It counts the rows this process inserts
// (COPY, and INSERT statements by their command tag) and analyzes a table
// once they pass autovacuum's default threshold (50 rows plus 10 % of the
// rows at the last ANALYZE).
// A nil *statsKeeper does nothing.
type statsKeeper struct {
	mu      sync.Mutex
	pending map[string]int64 // rows inserted since the table's last ANALYZE
	base    map[string]int64 // the table's rows at its last ANALYZE
}

// statsTables are the tables whose query plans depend on statistics
// (lookups by the non-unique edge columns, joins with resources) or on
// their size when a connection cached a generic plan: ANALYZE also
// invalidates the cached plans of a table. tombstones fills up during a
// cascade (CollectBatch's inserts, which it reports with Inserted): a
// statement on it planned generically while the table was nearly empty
// (CollectBatch's former DELETE by uid) stayed a sequential scan on the
// connections that had cached it, however large the table grew.
// Only its uid column is analyzed, whose statistics target migration 007
// sets to 1 (a sample of 300 rows): the invalidation is what counts.
var statsTables = map[string]bool{"resources": true, "owner_edges": true, "reference_edges": true, "tombstones": true}

// analyzeColumns limits the ANALYZE of a table to some columns.
var analyzeColumns = map[string]string{"tombstones": " (uid)"}

const (
	analyzeThreshold = 50  // autovacuum_analyze_threshold
	analyzeScale     = 0.1 // autovacuum_analyze_scale_factor
)

func newStatsKeeper() *statsKeeper {
	return &statsKeeper{pending: map[string]int64{}, base: map[string]int64{}}
}

// inserted records n rows inserted into table (by a transaction that may
// still roll back: the count is a trigger, not a total).
func (k *statsKeeper) inserted(table string, n int) {
	if k == nil || !statsTables[table] {
		return
	}
	k.mu.Lock()
	k.pending[table] += int64(n)
	k.mu.Unlock()
}

// insertedBy records the rows a statement inserted, when it is an
// INSERT INTO one of statsTables.
func (k *statsKeeper) insertedBy(sql string, rows int64) {
	if k == nil || rows <= 0 {
		return
	}
	rest, ok := strings.CutPrefix(sql, "INSERT INTO ")
	if !ok {
		return
	}
	table, _, _ := strings.Cut(rest, " ")
	k.inserted(table, int(rows))
}

// due returns the tables whose inserts passed the threshold, and resets
// their counts.
func (k *statsKeeper) due() []string {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for t, n := range k.pending {
		if float64(n) >= analyzeThreshold+analyzeScale*float64(k.base[t]) {
			out = append(out, t)
			k.base[t] += n // until analyzed() sets the table's size
			delete(k.pending, t)
		}
	}
	return out
}

// analyzed records the table's size (reltuples) after an ANALYZE.
func (k *statsKeeper) analyzed(table string, rows int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.base[table] = max(rows, 0)
}

// analyze starts ANALYZE on the tables that are due, in the background:
// the writer that crossed the threshold does not wait for it (ANALYZE
// blocks no reader or writer). Close waits for it. A role that does not
// own the tables gets a warning from the server, not an error; a failure
// is nobody's to handle (the transaction committed), so it is dropped.
func (b *backend) analyze(ctx context.Context) {
	tables := b.stats.due()
	if len(tables) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		for _, t := range tables {
			id := pgx.Identifier{t}.Sanitize()
			if _, err := b.pool.Exec(ctx, `ANALYZE `+id+analyzeColumns[t]); err != nil {
				continue
			}
			// The next one is due after 10 % of the table, as
			// autovacuum's (it may be far larger than what this process
			// wrote).
			var rows float64
			if err := b.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)`, id).Scan(&rows); err == nil {
				b.stats.analyzed(t, int64(rows))
			}
		}
	}()
}

// autovacuumOff reports whether the server's autovacuum is off.
func autovacuumOff(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
},
) (bool, error) {
	var v string
	if err := q.QueryRow(ctx, `SELECT current_setting('autovacuum')`).Scan(&v); err != nil {
		return false, err
	}
	return v == "off", nil
}
