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
	out, err := s.queryResources(ctx, s.b.Reader(), `SELECT r.doc FROM resources r
WHERE `+s.d.Collect.in("r.uid", `SELECT e.dependent_uid FROM owner_edges e WHERE e.owner_uid = $1`), ownerUID)
	sortResources(out)
	return out, err
}

// Referrers implements catalog.Store, from the reference_edges index.
// References match the target's kind, namespace and name literally.
func (s *Store) Referrers(ctx context.Context, target catalog.Key) ([]*catalog.Resource, error) {
	out, err := s.queryResources(ctx, s.b.Reader(), `SELECT r.doc FROM resources r
WHERE `+s.d.Collect.in("r.uid", `SELECT e.referrer_uid FROM reference_edges e
  WHERE e.target_kind = $1 AND e.target_namespace = $2 AND e.target_name = $3`), target.Kind, target.Namespace, target.Name)
	sortResources(out)
	return out, err
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
