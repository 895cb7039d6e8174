package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

// collectBatchMax bounds the items of one CollectBatch statement list.
const collectBatchMax = 1000

// CollectBatch implements catalog.Store: Delete then Purge of each item
// that can go at once, all in one transaction.
func (s *Store) CollectBatch(ctx context.Context, items []catalog.CollectItem) ([]string, error) {
	var purged []string
	for len(items) > 0 {
		n := min(len(items), collectBatchMax)
		got, err := s.collectBatch(ctx, items[:n])
		if err != nil {
			return purged, err
		}
		purged = append(purged, got...)
		items = items[n:]
	}
	return purged, nil
}

// collectItem is one element of the JSON list parameter of the staged
// CollectBatch (see CollectDialect.Items).
type collectItem struct {
	UID    string `json:"uid"`
	RV     int64  `json:"rv,omitempty"`
	N      int    `json:"n"`
	Reason string `json:"reason,omitempty"`
}

// collectBatch is set-based: the items that can go are picked in SQL
// (each one's version, phase, finalizers, dependents and held references
// checked in the write transaction), then the rows of all of them are
// written by one statement per table (SQLite, CollectDialect.Stage) or by
// one chained statement (PostgreSQL, CollectDialect.ChainItems). No
// document is decoded, rewritten or encoded: the DELETED event carries
// the stored document as it is (its resourceVersion is the event's, which
// the feed sets), and the statements' sizes do not grow with the batch.
func (s *Store) collectBatch(ctx context.Context, items []catalog.CollectItem) ([]string, error) {
	cd := s.d.Collect
	if cd.ChainItems == "" && len(cd.Stage) == 0 {
		return nil, errors.New("catalog: this database's dialect has no CollectBatch")
	}
	now := s.clock()
	actor := catalog.ActorFrom(ctx)
	tsJSON, err := json.Marshal(now)
	if err != nil {
		return nil, err
	}
	ts := string(tsJSON[1 : len(tsJSON)-1]) // the time as encoding/json writes it, unquoted
	seen := make(map[string]bool, len(items))
	cands := make([]collectItem, 0, len(items))
	for _, it := range items {
		if !seen[it.UID] {
			seen[it.UID] = true
			cands = append(cands, collectItem{UID: it.UID, RV: it.ResourceVersion, N: len(cands), Reason: it.Reason})
		}
	}
	var candDoc []byte
	if cd.ChainItems == "" {
		if candDoc, err = json.Marshal(cands); err != nil {
			return nil, err
		}
	}
	var purged []string
	err = s.writeTx(ctx, func(q Querier) error {
		purged = purged[:0]
		if err := s.checkFence(ctx, q, catalog.FenceFrom(ctx), now); err != nil {
			return err
		}
		if cd.ChainItems != "" {
			purged, err = collectChain(ctx, q, cd, cands, now, ts, actor, s.b.Notify())
			if c, ok := q.(InsertCounter); ok && err == nil {
				// The chained statement's inserts are not seen by the
				// querier (they are in WITH clauses): report them.
				for _, table := range []string{"changes", "tombstones", "audit"} {
					c.Inserted(table, len(purged))
				}
			}
			if err == nil && len(purged) == 0 {
				return errNoop
			}
			if err != nil {
				return err
			}
			return s.peerEdgesGone(ctx, q, purged, now)
		}
		// Lock the version counter first, as every resource writer does.
		first, err := nextVersions(ctx, q, len(cands))
		if err != nil {
			return err
		}
		purged, err = collectStaged(ctx, q, cd, string(candDoc), first, now, ts, actor)
		if err != nil {
			return err
		}
		if len(purged) == 0 {
			return errNoop
		}
		if err := s.peerEdgesGone(ctx, q, purged, now); err != nil {
			return err
		}
		return q.ExecBatch(ctx, s.b.Notify())
	})
	if errors.Is(err, errNoop) {
		return nil, nil
	}
	if err != nil {
		return nil, s.mapErr(err)
	}
	return purged, nil
}

// canGo is the condition on r, the resource of item i, that it can go at
// once: its version is the item's, it is neither Deleting nor finalized,
// and nothing depends on it or holds it, here or on a peer (a peer's
// back-reference of any kind holds it: see heldByPeers).
func canGo(cd CollectDialect) string {
	return `r.resource_version = i.rv AND r.phase IN ('Active', 'Scheduled') AND ` + cd.NoFinalizers + `
  AND NOT EXISTS (SELECT 1 FROM owner_edges e WHERE e.owner_uid = r.uid)
  AND NOT EXISTS (SELECT 1 FROM reference_edges e WHERE e.target_kind = r.kind AND e.target_namespace = r.namespace
                  AND e.target_name = r.name AND e.on_target_delete <> 'allowDangling')
  AND NOT EXISTS (SELECT 1 FROM peer_back_references p WHERE p.target_kind = r.kind AND p.target_namespace = r.namespace
                  AND p.target_name = r.name)`
}

// collectStaged is collectBatch with a stage table (CollectDialect.Stage):
// one statement parses the list and picks the items that can go into the
// stage table, numbered 0, 1, … in the caller's order, with the columns
// the tombstones and audit entries need; then one statement per table
// reads them from there. It returns the UIDs purged, in the items' order.
func collectStaged(ctx context.Context, q Querier, cd CollectDialect, list string, first int64, now time.Time, ts, actor string) ([]string, error) {
	for _, sql := range cd.Stage {
		if _, err := q.Exec(ctx, sql); err != nil {
			return nil, err
		}
	}
	st := cd.StageTable
	if _, err := q.Exec(ctx, `INSERT INTO `+st+` (n, uid, reason, kind, namespace, name, phase)
SELECT row_number() OVER (ORDER BY i.n) - 1, i.uid, COALESCE(i.reason, ''), r.kind, r.namespace, r.name, r.phase
FROM `+cd.Items("$1")+` JOIN resources r ON r.uid = i.uid
WHERE `+canGo(cd), list); err != nil {
		return nil, err
	}
	purged, err := queryUIDs(ctx, q, `SELECT uid FROM `+st+` ORDER BY n`)
	if err != nil || len(purged) == 0 {
		return nil, err
	}
	uids := `SELECT g.uid FROM ` + st + ` AS g`
	return purged, q.ExecBatch(ctx, []Stmt{
		// One DELETED event with the last stored state, as Kubernetes
		// sends for an object deleted without finalizers.
		{SQL: `INSERT INTO changes (version, type, kind, doc)
SELECT CAST($1 AS BIGINT) + g.n, '` + string(catalog.EventDeleted) + `', r.kind, r.doc
FROM ` + st + ` AS g JOIN resources r ON r.uid = g.uid ORDER BY g.n`, Args: []any{first}},
		// A tombstone left by an earlier resource with the same UID is
		// replaced, as Purge does.
		{SQL: `INSERT INTO tombstones (uid, kind, namespace, name, purged_at, doc)
SELECT g.uid, g.kind, g.namespace, g.name, CAST($1 AS BIGINT), ` + cd.Tombstone("g", `CAST($2 AS TEXT)`, `CAST($3 AS TEXT)`) + `
FROM ` + st + ` AS g WHERE true
ON CONFLICT (uid) DO UPDATE SET kind = excluded.kind, namespace = excluded.namespace, name = excluded.name,
  purged_at = excluded.purged_at, doc = excluded.doc`, Args: []any{nanos(now), ts, actor}},
		// One entry: the resource went from its phase to Purged.
		{SQL: `INSERT INTO audit (` + strings.Join(auditCols, ", ") + `)
SELECT CAST($1 AS BIGINT), CAST($2 AS TEXT), 'purge', g.kind, g.namespace, g.name, g.uid, g.phase, '` + string(catalog.PhasePurged) + `',
  g.reason, '' FROM ` + st + ` AS g ORDER BY g.n`, Args: []any{nanos(now), actor}},
		{SQL: `DELETE FROM owner_edges WHERE ` + cd.in("dependent_uid", uids)},
		{SQL: `DELETE FROM reference_edges WHERE ` + cd.in("referrer_uid", uids)},
		{SQL: `DELETE FROM resources WHERE ` + cd.in("uid", uids)},
		// Give back the versions not used: the counter row is locked
		// (one writer), so the feed sees no gap.
		{SQL: `UPDATE lethe_version SET value = $1 WHERE id = 1`, Args: []any{first + int64(len(purged)) - 1}},
	})
}

// collectChain is collectBatch as one statement of data-modifying WITH
// clauses (CollectDialect.ChainItems): the DELETE of the resources that
// can go returns their rows, from which the DELETED events (the versions
// after the counter's, in the items' order), tombstones (replacing one
// left by an earlier resource with the same UID), audit entries and edge
// deletes are written, and the counter is advanced past them. The
// counter's row lock, taken first by every resource writer, is what keeps
// the rows found unchanged until they are deleted: no row lock is needed.
// The lock, the statement and notify are sent in one round trip: the
// statement starts (and takes its snapshot) once the lock is held, and the
// lock is not held across a round trip to this process before the commit.
// It returns the UIDs purged, in the items' order.
func collectChain(ctx context.Context, q Querier, cd CollectDialect, cands []collectItem, now time.Time, ts, actor string, notify []Stmt) ([]string, error) {
	uids := make([]string, len(cands))
	rvs := make([]int64, len(cands))
	reasons := make([]string, len(cands))
	tombs := make([]string, len(cands))
	// The tombstone documents, without their key (GetTombstone fills it
	// from the row's columns): the same fields for every item but the
	// UID and the reason.
	actorJSON, err := json.Marshal(actor)
	if err != nil {
		return nil, err
	}
	tail := `,"purgedAt":"` + ts + `","actor":` + string(actorJSON)
	for i, c := range cands {
		uids[i], rvs[i], reasons[i] = c.UID, c.RV, c.Reason
		uid, err := json.Marshal(c.UID)
		if err != nil {
			return nil, err
		}
		doc := `{"uid":` + string(uid) + tail
		if c.Reason != "" {
			reason, err := json.Marshal(c.Reason)
			if err != nil {
				return nil, err
			}
			doc += `,"reason":` + string(reason)
		}
		tombs[i] = doc + `}`
	}
	chain := `WITH base AS (
  SELECT value FROM lethe_version WHERE id = 1
), gone AS (
  DELETE FROM resources r USING ` + cd.ChainItems + `
  WHERE r.uid = i.uid AND ` + canGo(cd) + `
  RETURNING r.uid, r.kind, r.namespace, r.name, r.phase, r.doc, i.n, i.reason, i.tomb
), g AS (
  SELECT gone.*, row_number() OVER (ORDER BY gone.n) - 1 AS k FROM gone
), changed AS (
  INSERT INTO changes (version, type, kind, doc)
  SELECT base.value + 1 + g.k, '` + string(catalog.EventDeleted) + `', g.kind, g.doc FROM g, base ORDER BY g.k
), buried AS (
  INSERT INTO tombstones (uid, kind, namespace, name, purged_at, doc)
  SELECT g.uid, g.kind, g.namespace, g.name, CAST($5 AS BIGINT), g.tomb
  FROM g
  ON CONFLICT (uid) DO UPDATE SET kind = excluded.kind, namespace = excluded.namespace, name = excluded.name,
    purged_at = excluded.purged_at, doc = excluded.doc
), audited AS (
  INSERT INTO audit (` + strings.Join(auditCols, ", ") + `)
  SELECT CAST($5 AS BIGINT), CAST($6 AS TEXT), 'purge', g.kind, g.namespace, g.name, g.uid, g.phase, '` + string(catalog.PhasePurged) + `',
    g.reason, '' FROM g ORDER BY g.k
), owners AS (
  DELETE FROM owner_edges WHERE ` + cd.in("dependent_uid", `SELECT g.uid FROM g`) + `
), refs AS (
  DELETE FROM reference_edges WHERE ` + cd.in("referrer_uid", `SELECT g.uid FROM g`) + `
), counter AS (
  UPDATE lethe_version SET value = (SELECT value FROM base) + (SELECT count(*) FROM g) WHERE id = 1
)
SELECT g.uid FROM g ORDER BY g.k`
	stmts := append([]Stmt{
		// Lock the version counter first, as every resource writer does.
		{SQL: `SELECT value FROM lethe_version WHERE id = 1 FOR UPDATE`},
		{SQL: chain, Args: []any{uids, rvs, reasons, tombs, nanos(now), actor}},
	}, notify...)
	var purged []string
	err = q.QueryBatch(ctx, stmts, func(i int, rows Rows) error {
		for i == 1 && rows.Next() {
			var uid string
			if err := rows.Scan(&uid); err != nil {
				return err
			}
			purged = append(purged, uid)
		}
		return nil
	})
	return purged, err
}

// queryUIDs returns the one text column of the rows of sql.
func queryUIDs(ctx context.Context, q Querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var uid string
		if err := rows.Scan(&uid); err != nil {
			return nil, err
		}
		out = append(out, uid)
	}
	return out, rows.Err()
}
