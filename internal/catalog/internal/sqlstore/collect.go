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

// collectItem is one element of the JSON list parameter of CollectBatch's
// statements (see CollectDialect.Items).
type collectItem struct {
	UID    string `json:"uid"`
	RV     int64  `json:"rv,omitempty"`
	N      int    `json:"n"`
	Reason string `json:"reason,omitempty"`
}

// collectBatch is set-based: one statement picks the items that can go
// (checking each one's version, phase, finalizers, dependents and held
// references in SQL), then one statement per table writes the rows for
// all of them. No document is decoded, rewritten or encoded: the DELETED
// event carries the stored document as it is (its resourceVersion is
// the event's, which the feed sets), and the statements' sizes do not
// grow with the batch (one JSON parameter).
func (s *Store) collectBatch(ctx context.Context, items []catalog.CollectItem) ([]string, error) {
	now := s.clock()
	actor := catalog.ActorFrom(ctx)
	tsJSON, err := json.Marshal(now)
	if err != nil {
		return nil, err
	}
	ts := string(tsJSON[1 : len(tsJSON)-1]) // the time as encoding/json writes it, unquoted
	byUID := make(map[string]catalog.CollectItem, len(items))
	cands := make([]collectItem, 0, len(items))
	cd := s.d.Collect
	for _, it := range items {
		if _, dup := byUID[it.UID]; !dup {
			byUID[it.UID] = it
			cands = append(cands, collectItem{UID: it.UID, RV: it.ResourceVersion, N: len(cands)})
		}
	}
	var candDoc []byte
	if cd.ChainItems == "" {
		if candDoc, err = json.Marshal(cands); err != nil {
			return nil, err
		}
	}
	lock := ""
	if s.d.ForUpdate != "" {
		lock = s.d.ForUpdate + " OF r"
	}
	var purged []string
	err = s.b.WriteTx(ctx, func(q Querier) error {
		purged = purged[:0]
		if err := s.checkFence(ctx, q, catalog.FenceFrom(ctx), now); err != nil {
			return err
		}
		// Lock the version counter first, as every resource writer does.
		first, err := nextVersions(ctx, q, len(cands))
		if err != nil {
			return err
		}
		if cd.ChainItems != "" {
			purged, err = collectChain(ctx, q, cd, cands, byUID, first, now, ts, actor)
			if err != nil {
				return err
			}
			if len(purged) == 0 {
				return errNoop
			}
			if c, ok := q.(InsertCounter); ok {
				for _, table := range []string{"changes", "tombstones", "audit"} {
					c.Inserted(table, len(purged))
				}
			}
			return s.b.Notify(ctx, q, first+int64(len(purged))-1)
		}
		can := map[string]bool{}
		if err := collectUIDs(ctx, q, can, `SELECT r.uid FROM `+cd.Items("$1")+` JOIN resources r ON r.uid = i.uid
WHERE `+canGo(cd)+lock, []any{string(candDoc)}); err != nil {
			return err
		}
		if len(can) == 0 {
			return errNoop
		}
		gone := make([]collectItem, 0, len(can))
		for _, c := range cands {
			if can[c.UID] {
				gone = append(gone, collectItem{UID: c.UID, N: len(gone), Reason: byUID[c.UID].Reason})
				purged = append(purged, c.UID)
			}
		}
		goneDoc, err := json.Marshal(gone)
		if err != nil {
			return err
		}
		list := string(goneDoc)
		items := cd.Items("$1")
		var stage []Stmt
		if len(cd.Stage) > 0 {
			for _, sql := range cd.Stage {
				a := []any{list}
				if !strings.Contains(sql, "$1") {
					a = nil
				}
				stage = append(stage, Stmt{SQL: sql, Args: a})
			}
			items = cd.Staged
		}
		from := items + ` JOIN resources r ON r.uid = i.uid`
		last := first + int64(len(gone)) - 1
		stmts := append(stage, []Stmt{
			// A tombstone left by an earlier resource with the same UID
			// is replaced, as Purge does.
			{SQL: `DELETE FROM tombstones WHERE ` + cd.in("uid", `SELECT i.uid FROM `+items), Args: []any{list}},
			// One DELETED event with the last stored state, as Kubernetes
			// sends for an object deleted without finalizers.
			{SQL: `INSERT INTO changes (version, type, kind, doc)
SELECT CAST($2 AS BIGINT) + i.n, '` + string(catalog.EventDeleted) + `', r.kind, r.doc FROM ` + from + ` ORDER BY i.n`,
				Args: []any{list, first}},
			{SQL: `INSERT INTO tombstones (uid, kind, namespace, name, purged_at, doc)
SELECT r.uid, r.kind, r.namespace, r.name, CAST($2 AS BIGINT), ` + cd.Tombstone(`CAST($3 AS TEXT)`, `CAST($4 AS TEXT)`) + ` FROM ` + from,
				Args: []any{list, nanos(now), ts, actor}},
			// One entry: the resource went from its phase to Purged.
			{SQL: `INSERT INTO audit (` + strings.Join(auditCols, ", ") + `)
SELECT CAST($2 AS BIGINT), CAST($3 AS TEXT), 'purge', r.kind, r.namespace, r.name, r.uid, r.phase, '` + string(catalog.PhasePurged) + `',
  COALESCE(i.reason, ''), '' FROM ` + from + ` ORDER BY i.n`,
				Args: []any{list, nanos(now), actor}},
			{SQL: `DELETE FROM owner_edges WHERE ` + cd.in("dependent_uid", `SELECT i.uid FROM `+items), Args: []any{list}},
			{SQL: `DELETE FROM reference_edges WHERE ` + cd.in("referrer_uid", `SELECT i.uid FROM `+items), Args: []any{list}},
			{SQL: `DELETE FROM resources WHERE ` + cd.in("uid", `SELECT i.uid FROM `+items), Args: []any{list}},
			// Give back the versions not used: the counter row is locked
			// (one writer), so the feed sees no gap.
			{SQL: `UPDATE lethe_version SET value = $1 WHERE id = 1`, Args: []any{last}},
		}...)
		if err := q.ExecBatch(ctx, stmts); err != nil {
			return err
		}
		return s.b.Notify(ctx, q, last)
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
// and nothing depends on it or holds it.
func canGo(cd CollectDialect) string {
	return `r.resource_version = i.rv AND r.phase IN ('Active', 'Scheduled') AND ` + cd.NoFinalizers + `
  AND NOT EXISTS (SELECT 1 FROM owner_edges e WHERE e.owner_uid = r.uid)
  AND NOT EXISTS (SELECT 1 FROM reference_edges e WHERE e.target_kind = r.kind AND e.target_namespace = r.namespace
                  AND e.target_name = r.name AND e.on_target_delete <> 'allowDangling')`
}

// collectChain is collectBatch as one statement of data-modifying WITH
// clauses (CollectDialect.Chain): the DELETE of the resources that can go
// returns their rows, from which the DELETED events (versions first, first
// + 1, ... in the items' order), tombstones (replacing one left by an
// earlier resource with the same UID), audit entries and edge deletes are
// written; the version counter gets back the versions not used. The
// counter's row lock, taken first by every resource writer, is what keeps
// the rows found unchanged until they are deleted: no row lock is needed.
// It returns the UIDs purged, in the items' order.
func collectChain(ctx context.Context, q Querier, cd CollectDialect, cands []collectItem, byUID map[string]catalog.CollectItem,
	first int64, now time.Time, ts, actor string,
) ([]string, error) {
	uids := make([]string, len(cands))
	rvs := make([]int64, len(cands))
	reasons := make([]string, len(cands))
	for i, c := range cands {
		uids[i], rvs[i], reasons[i] = c.UID, c.RV, byUID[c.UID].Reason
	}
	sql := `WITH gone AS (
  DELETE FROM resources r USING ` + cd.ChainItems + `
  WHERE r.uid = i.uid AND ` + canGo(cd) + `
  RETURNING r.uid, r.kind, r.namespace, r.name, r.phase, r.doc, i.n, i.reason
), g AS (
  SELECT gone.*, row_number() OVER (ORDER BY gone.n) - 1 AS k FROM gone
), changed AS (
  INSERT INTO changes (version, type, kind, doc)
  SELECT CAST($4 AS BIGINT) + g.k, '` + string(catalog.EventDeleted) + `', g.kind, g.doc FROM g ORDER BY g.k
), buried AS (
  INSERT INTO tombstones (uid, kind, namespace, name, purged_at, doc)
  SELECT r.uid, r.kind, r.namespace, r.name, CAST($5 AS BIGINT), ` + cd.Tombstone(`CAST($6 AS TEXT)`, `CAST($7 AS TEXT)`) + `
  FROM g AS r, LATERAL (SELECT NULLIF(r.reason, '')) AS i(reason)
  ON CONFLICT (uid) DO UPDATE SET kind = excluded.kind, namespace = excluded.namespace, name = excluded.name,
    purged_at = excluded.purged_at, doc = excluded.doc
), audited AS (
  INSERT INTO audit (` + strings.Join(auditCols, ", ") + `)
  SELECT CAST($5 AS BIGINT), CAST($7 AS TEXT), 'purge', g.kind, g.namespace, g.name, g.uid, g.phase, '` + string(catalog.PhasePurged) + `',
    g.reason, '' FROM g ORDER BY g.k
), owners AS (
  DELETE FROM owner_edges WHERE ` + cd.in("dependent_uid", `SELECT g.uid FROM g`) + `
), refs AS (
  DELETE FROM reference_edges WHERE ` + cd.in("referrer_uid", `SELECT g.uid FROM g`) + `
), counter AS (
  UPDATE lethe_version SET value = CAST($4 AS BIGINT) - 1 + (SELECT count(*) FROM g) WHERE id = 1
)
SELECT g.uid FROM g ORDER BY g.k`
	rows, err := q.Query(ctx, sql, uids, rvs, reasons, first, nanos(now), ts, actor)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var purged []string
	for rows.Next() {
		var uid string
		if err := rows.Scan(&uid); err != nil {
			return nil, err
		}
		purged = append(purged, uid)
	}
	return purged, rows.Err()
}

func collectUIDs(ctx context.Context, q Querier, into map[string]bool, sql string, args []any) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var uid string
		if err := rows.Scan(&uid); err != nil {
			return err
		}
		into[uid] = true
	}
	return rows.Err()
}
