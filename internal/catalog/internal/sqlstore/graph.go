package sqlstore

import (
	"context"
	"sort"

	"github.com/lethehq/lethe/internal/catalog"
)

// Graph: the owner and reference edges, written with each resource and read
// by Dependents and Referrers.

func edgeStmts(r *catalog.Resource) []Stmt {
	var out []Stmt
	for _, o := range r.Owners {
		out = append(out, Stmt{SQL: `INSERT INTO owner_edges (owner_uid, dependent_uid, block_owner_deletion) VALUES ($1, $2, $3)
ON CONFLICT (owner_uid, dependent_uid) DO UPDATE SET block_owner_deletion = excluded.block_owner_deletion`,
			Args: []any{o.UID, r.UID, o.BlockOwnerDeletion}})
	}
	for _, ref := range r.References {
		out = append(out, Stmt{SQL: `INSERT INTO reference_edges (target_kind, target_namespace, target_name, referrer_uid, on_target_delete)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (target_kind, target_namespace, target_name, referrer_uid) DO UPDATE SET on_target_delete = excluded.on_target_delete`,
			Args: []any{ref.Kind, ref.Namespace, ref.Name, r.UID, string(ref.OnTargetDelete)}})
	}
	return out
}

// Dependents implements catalog.Store, from the owner_edges index; ordered
// by kind, namespace and name.
func (s *Store) Dependents(ctx context.Context, ownerUID string) ([]*catalog.Resource, error) {
	out, err := s.queryResources(ctx, s.b.Reader(), s.edgeRead("dependent_uid",
		`owner_edges e`, `e.owner_uid = $1`), ownerUID)
	sortResources(out)
	return out, err
}

// Referrers implements catalog.Store, from the reference_edges index.
// References match the target's kind, namespace and name literally.
func (s *Store) Referrers(ctx context.Context, target catalog.Key) ([]*catalog.Resource, error) {
	out, err := s.queryResources(ctx, s.b.Reader(), s.edgeRead("referrer_uid",
		`reference_edges e`, `e.target_kind = $1 AND e.target_namespace = $2 AND e.target_name = $3`), target.Kind, target.Namespace, target.Name)
	sortResources(out)
	return out, err
}

// edgeRead is the query of the documents of the resources whose uid is
// column col of the edges (table e) matching where. Where the dialect
// writes sub-selects as = ANY(ARRAY(...)) (PostgreSQL), a sub-select: a
// join there was planned anew on every call, and costing its merge join
// (mergejoinscansel) took about 1 ms per call at 1M resources. SQLite
// joins (its IN list would be built into a temporary B-tree first).
func (s *Store) edgeRead(col, edges, where string) string {
	if s.d.Collect.In != nil {
		return `SELECT r.doc FROM resources r WHERE ` + s.d.Collect.in("r.uid", `SELECT e.`+col+` FROM `+edges+` WHERE `+where)
	}
	return `SELECT r.doc FROM ` + edges + ` JOIN resources r ON r.uid = e.` + col + ` WHERE ` + where
}

func sortResources(rs []*catalog.Resource) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}
