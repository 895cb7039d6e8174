package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/lethehq/lethe/internal/catalog"
)

// Undelete implements catalog.Store. It works until the resource enters
// Deleting, even after the delay has expired. An undeleted resource also
// leaves every cascade that reaches it, in the same transaction: its
// owner edges to owners that are Deleting or gone, and its cascade
// references to targets that are Deleting, are removed (an owner still
// Deleting would otherwise schedule it again on its next step, and a
// gone owner's dependents are deleted). That is a second write, one
// version after the undelete's, with its own UPDATED event and a
// leave-cascade audit entry: a follower of the change feed sees the
// undelete with the edges it had (and wakes the owners it leaves), then
// the edges gone.
func (s *Store) Undelete(ctx context.Context, k catalog.Key, reason string) (*catalog.Resource, error) {
	now := s.clock()
	var out *catalog.Resource
	err := s.writeTx(ctx, func(q Querier) error {
		if err := s.checkFence(ctx, q, catalog.FenceFrom(ctx), now); err != nil {
			return err
		}
		ver, cur, err := s.lockAndGet(ctx, q, 1, k)
		if err != nil {
			return err
		}
		if cur.Phase != catalog.PhaseScheduled {
			return transitionErr(cur, catalog.PhaseActive, "only a Scheduled resource can be undeleted")
		}
		undone := clone(cur)
		undone.Phase = catalog.PhaseActive
		undone.DeletionDueAt = nil
		undone.PropagationPolicy = ""
		undone.DeletionRoot = nil
		delete(undone.Annotations, catalog.AnnotationDeletionScheduledAt)
		if len(undone.Annotations) == 0 {
			undone.Annotations = nil
		}
		undone.ResourceVersion = ver
		undone.UpdatedAt = now
		left, why, err := s.cascadesReaching(ctx, q, undone)
		if err != nil {
			return err
		}
		doc, err := encode(undone)
		if err != nil {
			return err
		}
		actor := catalog.ActorFrom(ctx)
		// The undelete's own event carries the edges it had: a follower
		// of the feed wakes the owners and targets it leaves.
		stmts := []Stmt{changeStmt(catalog.EventUpdated, ver, undone, doc),
			auditStmt(catalog.AuditEntry{Time: now, Actor: actor, Action: "undelete", Kind: k.Kind, Namespace: k.Namespace,
				Name: k.Name, UID: cur.UID, FromPhase: cur.Phase, ToPhase: undone.Phase, Reason: reason})}
		out = undone
		if left != nil {
			left.ResourceVersion = ver + 1
			if doc, err = encode(left); err != nil {
				return err
			}
			details, err := json.Marshal(why)
			if err != nil {
				return err
			}
			stmts = append(stmts,
				Stmt{SQL: `UPDATE lethe_version SET value = value + 1 WHERE id = 1`},
				Stmt{SQL: `DELETE FROM owner_edges WHERE dependent_uid = $1`, Args: []any{left.UID}},
				Stmt{SQL: `DELETE FROM reference_edges WHERE referrer_uid = $1`, Args: []any{left.UID}})
			stmts = append(stmts, edgeStmts(left)...)
			stmts = append(stmts, changeStmt(catalog.EventUpdated, left.ResourceVersion, left, doc),
				auditStmt(catalog.AuditEntry{Time: now, Actor: actor, Action: catalog.AuditLeaveCascade, Kind: k.Kind, Namespace: k.Namespace,
					Name: k.Name, UID: cur.UID, FromPhase: left.Phase, ToPhase: left.Phase, Reason: why.reason(), Details: details}))
			out = left
		}
		stmts = append([]Stmt{rowStmt(out, doc)}, stmts...)
		return q.ExecBatch(ctx, append(stmts, s.b.Notify()...))
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return out, nil
}

// leftCascades is what an undelete took a resource out of: the owners
// (Deleting or gone) and the targets of cascade references (Deleting)
// whose cascades reached it. It is the leave-cascade audit entry's
// details.
type leftCascades struct {
	Owners     []leftEdge `json:"owners,omitempty"`
	References []leftEdge `json:"references,omitempty"`
}

type leftEdge struct {
	catalog.ObjectRef
	// Phase is Deleting, or Purged for an owner that is gone.
	Phase catalog.Phase `json:"phase"`
}

func (l *leftCascades) reason() string {
	var parts []string
	for _, o := range l.Owners {
		parts = append(parts, "owner "+o.String()+" ("+string(o.Phase)+") no longer owns it")
	}
	for _, t := range l.References {
		parts = append(parts, "its cascade reference to "+t.String()+" ("+string(t.Phase)+") removed")
	}
	return "undeleted, it leaves the cascades that reached it: " + strings.Join(parts, "; ")
}

// cascadesReaching returns a copy of r without the owner edges and
// cascade references through which a deletion in progress reaches it,
// and what they were; nil when there is none. r is left as it is. Deleting is irreversible and a gone
// owner does not come back, so what it reads cannot change before the
// commit.
func (s *Store) cascadesReaching(ctx context.Context, q Querier, r *catalog.Resource) (*catalog.Resource, *leftCascades, error) {
	var why leftCascades
	next := clone(r)
	var err error
	next.Owners = slices.DeleteFunc(next.Owners, func(o catalog.OwnerRef) bool {
		if err != nil {
			return false
		}
		var kind, ns, name, phase string
		e := q.QueryRow(ctx, `SELECT kind, namespace, name, phase FROM resources WHERE uid = $1`, o.UID).Scan(&kind, &ns, &name, &phase)
		switch {
		case errors.Is(e, ErrNoRows):
			why.Owners = append(why.Owners, leftEdge{catalog.ObjectRef{Kind: o.Kind, Namespace: r.Namespace, Name: o.Name, UID: o.UID}, catalog.PhasePurged})
			return true
		case e != nil:
			err = e
			return false
		case catalog.Phase(phase) == catalog.PhaseDeleting:
			why.Owners = append(why.Owners, leftEdge{catalog.ObjectRef{Kind: kind, Namespace: ns, Name: name, UID: o.UID}, catalog.PhaseDeleting})
			return true
		}
		return false
	})
	next.References = slices.DeleteFunc(next.References, func(ref catalog.Reference) bool {
		if err != nil || ref.OnTargetDelete != catalog.RefCascade {
			return false
		}
		var uid, phase string
		e := q.QueryRow(ctx, `SELECT uid, phase FROM resources WHERE kind = $1 AND namespace = $2 AND name = $3`,
			ref.Kind, ref.Namespace, ref.Name).Scan(&uid, &phase)
		switch {
		case errors.Is(e, ErrNoRows):
			return false
		case e != nil:
			err = e
			return false
		case catalog.Phase(phase) == catalog.PhaseDeleting && (ref.UID == "" || ref.UID == uid):
			why.References = append(why.References, leftEdge{catalog.ObjectRef{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, UID: uid}, catalog.PhaseDeleting})
			return true
		}
		return false
	})
	if err != nil {
		return nil, nil, err
	}
	if len(why.Owners)+len(why.References) == 0 {
		return nil, nil, nil
	}
	if len(next.Owners) == 0 {
		next.Owners = nil
	}
	if len(next.References) == 0 {
		next.References = nil
	}
	return next, &why, nil
}
