package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/lethehq/lethe/internal/catalog"
)

var resourceInsert = InsertSQL("resources", []string{"uid", "kind", "namespace", "name", "phase", "due_at", "resource_version", "doc"})

// WriteBatch implements catalog.Store: every write in one transaction,
// after the version counter (see nextVersions), so the batch commits
// whole or not at all.
func (s *Store) WriteBatch(ctx context.Context, ws []catalog.Write) ([]*catalog.Resource, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	now := s.clock()
	actor := catalog.ActorFrom(ctx)
	seen := make(map[catalog.Key]bool, len(ws))
	for _, w := range ws {
		if err := validateResource(w.Resource); err != nil {
			return nil, err
		}
		k := w.Resource.Key()
		if seen[k] {
			return nil, fmt.Errorf("%w: %s appears twice in the batch", catalog.ErrInvalid, k)
		}
		seen[k] = true
	}
	var out []*catalog.Resource
	err := s.writeTx(ctx, func(q Querier) error {
		if err := s.checkFence(ctx, q, catalog.FenceFrom(ctx), now); err != nil {
			return err
		}
		first, err := nextVersions(ctx, q, len(ws))
		if err != nil {
			return err
		}
		out = make([]*catalog.Resource, len(ws))
		// owners are the owner uids known to exist: created earlier in
		// the batch or found, so each is read once.
		owners := map[string]bool{}
		var grew []*catalog.Resource // written with a new deletion edge
		for i, w := range ws {
			ver := first + int64(i)
			in := w.Resource
			var next *catalog.Resource
			var stmts []Stmt
			action, from := "update", catalog.Phase("")
			evType := catalog.EventUpdated
			if w.Create {
				// A taken key fails the insert below (the unique key on
				// kind, namespace and name): ErrAlreadyExists, without a
				// read per create.
				next = clone(in)
				if next.UID == "" {
					id, err := uuid.NewV7()
					if err != nil {
						return err
					}
					next.UID = id.String()
				}
				next.Phase = catalog.PhaseActive
				next.DeletionDueAt, next.DeletionTimestamp, next.PropagationPolicy = nil, nil, ""
				next.CreatedAt = now
				action, evType = "create", catalog.EventAdded
				grew = append(grew, next)
			} else {
				cur, err := s.getOne(ctx, q, in.Key().String(), resourceByKey+s.d.ForUpdate, in.Kind, in.Namespace, in.Name)
				if err != nil {
					return err
				}
				if next, err = updated(cur, in); err != nil {
					return err
				}
				from = cur.Phase
				if grewEdges(cur, next) {
					grew = append(grew, next)
				}
				stmts = append(stmts,
					Stmt{SQL: `DELETE FROM owner_edges WHERE dependent_uid = $1`, Args: []any{next.UID}},
					Stmt{SQL: `DELETE FROM reference_edges WHERE referrer_uid = $1`, Args: []any{next.UID}})
			}
			for _, o := range next.Owners {
				if owners[o.UID] {
					continue
				}
				var n int
				if err := q.QueryRow(ctx, `SELECT count(*) FROM resources WHERE uid = $1`, o.UID).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					return fmt.Errorf("%s: owner %s/%s (uid %s): %w", next.Key(), o.Kind, o.Name, o.UID, catalog.ErrNotFound)
				}
				owners[o.UID] = true
			}
			next.ResourceVersion = ver
			next.UpdatedAt = now
			doc, err := encode(next)
			if err != nil {
				return err
			}
			if w.Create {
				stmts = append(stmts, Stmt{SQL: resourceInsert,
					Args: []any{next.UID, next.Kind, next.Namespace, next.Name, string(next.Phase), nil, next.ResourceVersion, doc}})
			} else {
				stmts = append(stmts, rowStmt(next, doc))
			}
			stmts = append(stmts, edgeStmts(next)...)
			stmts = append(stmts, changeStmt(evType, ver, next, doc), auditStmt(catalog.AuditEntry{Time: now, Actor: actor, Action: action,
				Kind: next.Kind, Namespace: next.Namespace, Name: next.Name, UID: next.UID, FromPhase: from, ToPhase: next.Phase}))
			if err := q.ExecBatch(ctx, stmts); err != nil {
				if err := s.mapErr(err); errors.Is(err, catalog.ErrAlreadyExists) {
					return fmt.Errorf("%s: %w", next.Key(), err)
				}
				return err
			}
			out[i] = next
		}
		if err := s.checkCycles(ctx, q, grew); err != nil {
			return err
		}
		return q.ExecBatch(ctx, s.b.Notify())
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return out, nil
}
