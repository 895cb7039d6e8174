package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

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
	Prop   string `json:"prop,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// collectBatch is set-based: one statement picks the items that can go
// (checking each one's version, phase, finalizers, dependents and held
// references in SQL), then one statement per table writes what Delete
// then Purge would for all of them,
// the documents rewritten by the database's JSON functions. No resource is decoded or encoded in Go, and
// the statements' sizes do not grow with the batch (one JSON parameter).
func (s *Store) collectBatch(ctx context.Context, items []catalog.CollectItem) ([]string, error) {
	if s.d.Collect.InGo {
		return s.collectBatchInGo(ctx, items)
	}
	for _, it := range items {
		if err := validPropagation(it.Propagation); err != nil {
			return nil, err
		}
	}
	now := s.clock()
	actor := catalog.ActorFrom(ctx)
	tsJSON, err := json.Marshal(now)
	if err != nil {
		return nil, err
	}
	ts := string(tsJSON[1 : len(tsJSON)-1]) // the time as encoding/json writes it, unquoted
	byUID := make(map[string]catalog.CollectItem, len(items))
	cands := make([]collectItem, 0, len(items))
	for _, it := range items {
		if _, dup := byUID[it.UID]; !dup {
			byUID[it.UID] = it
			cands = append(cands, collectItem{UID: it.UID, RV: it.ResourceVersion, N: len(cands)})
		}
	}
	candDoc, err := json.Marshal(cands)
	if err != nil {
		return nil, err
	}
	cd := s.d.Collect
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
		first, err := nextVersions(ctx, q, 2*len(cands))
		if err != nil {
			return err
		}
		can := map[string]string{} // uid → the stored propagationPolicy
		if err := collectCandidates(ctx, q, can, `SELECT r.uid, COALESCE(`+cd.Field("propagationPolicy")+`, '') FROM `+cd.Items("$1")+` JOIN resources r ON r.uid = i.uid
WHERE r.resource_version = i.rv AND r.phase IN ('Active', 'Scheduled') AND `+cd.NoFinalizers+`
  AND NOT EXISTS (SELECT 1 FROM owner_edges e WHERE e.owner_uid = r.uid)
  AND NOT EXISTS (SELECT 1 FROM reference_edges e WHERE e.target_kind = r.kind AND e.target_namespace = r.namespace
                  AND e.target_name = r.name AND e.on_target_delete <> 'allowDangling')`+lock, []any{string(candDoc)}); err != nil {
			return err
		}
		if len(can) == 0 {
			return errNoop
		}
		gone := make([]collectItem, 0, len(can))
		for _, c := range cands {
			if stored, ok := can[c.UID]; ok {
				it := byUID[c.UID]
				prop := cmpOr(it.Propagation, catalog.Propagation(stored), catalog.PropagationForeground)
				gone = append(gone, collectItem{UID: c.UID, N: len(gone), Prop: string(prop), Reason: it.Reason})
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
		ver := `(CAST($2 AS BIGINT) + 2 * i.n)`
		tsArg := `CAST($3 AS TEXT)`
		prop := `i.prop`
		audit := func(action string, before, after catalog.Phase) Stmt {
			fromPhase := `'` + string(before) + `'`
			if before == "" {
				fromPhase = `r.phase`
			}
			return Stmt{SQL: `INSERT INTO audit (` + strings.Join(auditCols, ", ") + `)
SELECT CAST($2 AS BIGINT), CAST($3 AS TEXT), '` + action + `', r.kind, r.namespace, r.name, r.uid, ` + fromPhase + `, '` + string(after) + `',
  COALESCE(i.reason, ''), '' FROM ` + from + ` ORDER BY i.n`,
				Args: []any{list, nanos(now), actor}}
		}
		last := first + 2*int64(len(gone)) - 1
		stmts := append(stage, []Stmt{
			// A tombstone left by an earlier resource with the same UID
			// is replaced, as Purge does.
			{SQL: `DELETE FROM tombstones WHERE uid IN (SELECT i.uid FROM ` + items + `)`, Args: []any{list}},
			{SQL: `INSERT INTO changes (version, type, kind, doc)
SELECT ` + ver + `, '` + string(catalog.EventUpdated) + `', r.kind, ` + cd.Deleting(prop, ver, tsArg) + ` FROM ` + from,
				Args: []any{list, first, ts}},
			{SQL: `INSERT INTO changes (version, type, kind, doc)
SELECT ` + ver + ` + 1, '` + string(catalog.EventDeleted) + `', r.kind, ` + cd.Deleting(prop, ver+" + 1", tsArg) + ` FROM ` + from,
				Args: []any{list, first, ts}},
			{SQL: `INSERT INTO tombstones (uid, kind, namespace, name, purged_at, doc)
SELECT r.uid, r.kind, r.namespace, r.name, CAST($2 AS BIGINT), ` + cd.Tombstone(tsArg, `CAST($4 AS TEXT)`) + ` FROM ` + from,
				Args: []any{list, nanos(now), ts, actor}},
			audit("delete", "", catalog.PhaseDeleting),
			audit("purge", catalog.PhaseDeleting, catalog.PhasePurged),
			{SQL: `DELETE FROM resources WHERE uid IN (SELECT i.uid FROM ` + items + `)`, Args: []any{list}},
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

// collectCandidates reads (uid, propagationPolicy) rows into into.
func collectCandidates(ctx context.Context, q Querier, into map[string]string, sql string, args []any) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var uid, prop string
		if err := rows.Scan(&uid, &prop); err != nil {
			return err
		}
		into[uid] = prop
	}
	return rows.Err()
}

func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

// collectBatchInGo is CollectBatch with the documents decoded and encoded in
// Go and the rows sent with InsertRows (COPY on PostgreSQL): on PostgreSQL
// it beats the set-based statement, whose jsonb parsing and printing the
// server pays for (see CollectDialect.InGo).
func (s *Store) collectBatchInGo(ctx context.Context, items []catalog.CollectItem) ([]string, error) {
	for _, it := range items {
		if err := validPropagation(it.Propagation); err != nil {
			return nil, err
		}
	}
	now := s.clock()
	actor := catalog.ActorFrom(ctx)
	var purged []string
	err := s.b.WriteTx(ctx, func(q Querier) error {
		purged = purged[:0]
		if err := s.checkFence(ctx, q, catalog.FenceFrom(ctx), now); err != nil {
			return err
		}
		byUID := make(map[string]catalog.CollectItem, len(items))
		args := make([]any, 0, len(items))
		for _, it := range items {
			if _, dup := byUID[it.UID]; !dup {
				byUID[it.UID] = it
				args = append(args, it.UID)
			}
		}
		in := placeholders(1, len(args))
		// Lock the version counter first, as every resource writer does.
		first, err := nextVersions(ctx, q, 2*len(args))
		if err != nil {
			return err
		}
		rows, err := s.queryResources(ctx, q, `SELECT doc FROM resources WHERE uid IN (`+in+`)`+s.d.ForUpdate, args...)
		if err != nil {
			return err
		}
		held := map[string]bool{}
		if err := s.collectUIDs(ctx, q, held, `SELECT DISTINCT owner_uid FROM owner_edges WHERE owner_uid IN (`+in+`)`, args); err != nil {
			return err
		}
		if err := s.collectUIDs(ctx, q, held, `SELECT DISTINCT r.uid FROM resources r JOIN reference_edges e
ON e.target_kind = r.kind AND e.target_namespace = r.namespace AND e.target_name = r.name
WHERE r.uid IN (`+in+`) AND e.on_target_delete <> 'allowDangling'`, args); err != nil {
			return err
		}
		var changeRows, auditRows, tombRows [][]any
		var gone []any
		ver := first
		for _, cur := range rows {
			it := byUID[cur.UID]
			if held[cur.UID] || cur.ResourceVersion != it.ResourceVersion || len(cur.Finalizers) > 0 ||
				(cur.Phase != catalog.PhaseActive && cur.Phase != catalog.PhaseScheduled) {
				continue
			}
			del := clone(cur)
			del.PropagationPolicy = cmpOr(it.Propagation, cur.PropagationPolicy, catalog.PropagationForeground)
			del.Phase, del.DeletionDueAt = catalog.PhaseDeleting, nil
			ts := now
			del.DeletionTimestamp = &ts
			del.ResourceVersion, del.UpdatedAt = ver, now
			delDoc, err := encode(del)
			if err != nil {
				return err
			}
			last := clone(del)
			last.ResourceVersion = ver + 1
			lastDoc, err := encode(last)
			if err != nil {
				return err
			}
			tsDoc, err := encode(catalog.Tombstone{Key: cur.Key(), UID: cur.UID, PurgedAt: now, Actor: actor, Reason: it.Reason})
			if err != nil {
				return err
			}
			entry := func(action string, from, to catalog.Phase) []any {
				return auditStmt(catalog.AuditEntry{Time: now, Actor: actor, Action: action, Kind: cur.Kind, Namespace: cur.Namespace,
					Name: cur.Name, UID: cur.UID, FromPhase: from, ToPhase: to, Reason: it.Reason}).Args
			}
			changeRows = append(changeRows,
				[]any{ver, string(catalog.EventUpdated), cur.Kind, delDoc},
				[]any{ver + 1, string(catalog.EventDeleted), cur.Kind, lastDoc})
			auditRows = append(auditRows, entry("delete", cur.Phase, catalog.PhaseDeleting), entry("purge", catalog.PhaseDeleting, catalog.PhasePurged))
			tombRows = append(tombRows, []any{cur.UID, cur.Kind, cur.Namespace, cur.Name, nanos(now), tsDoc})
			gone = append(gone, cur.UID)
			purged = append(purged, cur.UID)
			ver += 2
		}
		if len(gone) == 0 {
			return errNoop
		}
		// Give back the versions not used: the counter row is locked
		// (one writer), so the feed sees no gap.
		if _, err := q.Exec(ctx, `UPDATE lethe_version SET value = $1 WHERE id = 1`, ver-1); err != nil {
			return err
		}
		// A tombstone left by an earlier resource with the same UID is
		// replaced, as Purge does.
		if _, err := q.Exec(ctx, `DELETE FROM tombstones WHERE uid IN (`+placeholders(1, len(gone))+`)`, gone...); err != nil {
			return err
		}
		if _, err := q.Exec(ctx, `DELETE FROM resources WHERE uid IN (`+placeholders(1, len(gone))+`)`, gone...); err != nil {
			return err
		}
		for _, ins := range []struct {
			table string
			cols  []string
			rows  [][]any
		}{
			{"tombstones", []string{"uid", "kind", "namespace", "name", "purged_at", "doc"}, tombRows},
			{"changes", []string{"version", "type", "kind", "doc"}, changeRows},
			{"audit", auditCols, auditRows},
		} {
			if err := q.InsertRows(ctx, ins.table, ins.cols, ins.rows); err != nil {
				return err
			}
		}
		return s.b.Notify(ctx, q, ver-1)
	})
	if errors.Is(err, errNoop) {
		return nil, nil
	}
	if err != nil {
		return nil, s.mapErr(err)
	}
	return purged, nil
}

func (s *Store) collectUIDs(ctx context.Context, q Querier, into map[string]bool, sql string, args []any) error {
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
