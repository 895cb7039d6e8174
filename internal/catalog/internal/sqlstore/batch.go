package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/lethehq/lethe/internal/catalog"
)

var resourceInsert = InsertSQL("resources", []string{"uid", "kind", "namespace", "name", "phase", "due_at", "resource_version", "doc"})

// WriteBatch implements catalog.Store: WriteEach over ws.
func (s *Store) WriteBatch(ctx context.Context, ws []catalog.Write) ([]*catalog.Resource, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	out := make([]*catalog.Resource, len(ws))
	err := s.WriteEach(ctx, len(ws), func(i int) (catalog.Write, error) { return ws[i], nil },
		func(i int, r *catalog.Resource) { out[i] = r })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WriteEach implements catalog.Store: every write in one transaction,
// after the version counter (see nextVersions), so the batch commits
// whole or not at all. It holds none of the writes: each is asked for,
// written and handed back in turn, and the cycle check at the end reads
// the rows (and keeps only the uids of the resources that gained an
// edge).
func (s *Store) WriteEach(ctx context.Context, n int, at func(i int) (catalog.Write, error), done func(i int, r *catalog.Resource)) error {
	if n <= 0 {
		return nil
	}
	now := s.clock()
	actor := catalog.ActorFrom(ctx)
	seen := make(map[catalog.Key]bool, n)
	err := s.writeTx(ctx, func(q Querier) error {
		clear(seen) // a retried transaction starts again
		if err := s.checkFence(ctx, q, catalog.FenceFrom(ctx), now); err != nil {
			return err
		}
		first, err := nextVersions(ctx, q, n)
		if err != nil {
			return err
		}
		// owners are the owner uids known to exist: created earlier in
		// the batch or found, so each is read once.
		owners := map[string]bool{}
		var grew []string // the uids written with a new deletion edge in
		for i := range n {
			w, err := at(i)
			if err != nil {
				return err
			}
			if err := validateResource(w.Resource); err != nil {
				return err
			}
			k := w.Resource.Key()
			if seen[k] {
				return fmt.Errorf("%w: %s appears twice in the batch", catalog.ErrInvalid, k)
			}
			seen[k] = true
			ver := first + int64(i)
			in := w.Resource
			var next *catalog.Resource
			var stmts []Stmt
			action, from, reason := "update", catalog.Phase(""), ""
			evType := catalog.EventUpdated
			if w.Create {
				// A taken key fails the insert below (the unique key on
				// kind, namespace and name): ErrAlreadyExists, without a
				// read per create. The stored resource shares its maps
				// and slices with the caller's (see WriteBatch): a batch
				// of tens of thousands is not held twice.
				cp := *in
				next = &cp
				if next.UID == "" {
					id, err := uuid.NewV7()
					if err != nil {
						return err
					}
					next.UID = id.String()
				}
				next.Phase = catalog.PhaseActive
				next.DeletionDueAt, next.DeletionTimestamp, next.PropagationPolicy, next.DeletionRoot = nil, nil, "", nil
				next.CreatedAt = now
				action, evType = "create", catalog.EventAdded
				if cycleEdgesIn(next) {
					grew = append(grew, next.UID)
				}
			} else {
				cur, err := s.getOne(ctx, q, in.Key().String(), resourceByKey+s.d.ForUpdate, in.Kind, in.Namespace, in.Name)
				if err != nil {
					return err
				}
				if next, err = updated(cur, in); err != nil {
					return err
				}
				from = cur.Phase
				reason = "changed: " + changedFields(cur, next)
				if grewEdges(cur, next) && cycleEdgesIn(next) {
					grew = append(grew, next.UID)
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
				Kind: next.Kind, Namespace: next.Namespace, Name: next.Name, UID: next.UID, FromPhase: from, ToPhase: next.Phase, Reason: reason}))
			if err := q.ExecBatch(ctx, stmts); err != nil {
				if err := s.mapErr(err); errors.Is(err, catalog.ErrAlreadyExists) {
					return fmt.Errorf("%s: %w", next.Key(), err)
				}
				return err
			}
			done(i, next)
		}
		if err := s.checkCycleCandidates(ctx, q, grew); err != nil {
			return err
		}
		return q.ExecBatch(ctx, s.b.Notify())
	})
	return s.mapErr(err)
}
