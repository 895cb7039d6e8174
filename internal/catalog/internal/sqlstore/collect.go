package sqlstore

import (
	"context"
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

func (s *Store) collectBatch(ctx context.Context, items []catalog.CollectItem) ([]string, error) {
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
