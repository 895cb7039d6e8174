package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// statsKeeper runs ANALYZE on the graph tables as autovacuum would, for a
// server whose autovacuum is off (it is on by default): without
// statistics the planner assumes 200 distinct values per column, so
// CollectBatch's edge deletes (dependent_uid IN (the batch)) were
// estimated at half of owner_edges and ran as a sequential scan of it,
// every batch: 540 ms per 1,000 resources at 1M resources, the cost
// growing with the catalog. It counts the rows this process inserts in
// bulk (InsertRows) and analyzes a table once they pass autovacuum's
// default threshold (50 rows plus 10 % of the rows at the last ANALYZE).
// A nil *statsKeeper does nothing.
type statsKeeper struct {
	mu      sync.Mutex
	pending map[string]int64 // rows inserted since the table's last ANALYZE
	base    map[string]int64 // the table's rows at its last ANALYZE
}

// statsTables are the tables whose query plans depend on statistics:
// lookups by the non-unique edge columns, and joins with resources.
var statsTables = map[string]bool{"resources": true, "owner_edges": true, "reference_edges": true}

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

// analyze runs ANALYZE on the tables that are due. A role that does not
// own them gets a warning from the server, not an error; a failure is
// not the caller's (its transaction committed), so it is dropped.
func (b *backend) analyze(ctx context.Context) {
	for _, t := range b.stats.due() {
		id := pgx.Identifier{t}.Sanitize()
		if _, err := b.pool.Exec(ctx, `ANALYZE `+id); err != nil {
			continue
		}
		// The next one is due after 10 % of the table, as autovacuum's
		// (the table may be far larger than what this process wrote).
		var rows float64
		if err := b.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)`, id).Scan(&rows); err == nil {
			b.stats.analyzed(t, int64(rows))
		}
	}
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
