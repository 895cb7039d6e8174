package sqlstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
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

// Deletion cycles. A deletion travels from an owner to its dependents and
// from the target of a block or cascade reference to its referrer, and an
// owner (Foreground), or such a target, may wait for what it reaches: a
// cycle of these edges, in any mix, is a deletion that can never finish.
// Every write that adds an edge checks, in its own transaction, after its
// rows are written and while it holds the version counter's lock (which
// every writer of edges takes first: see nextVersions; SQLite's writer is
// one), that no written resource is on a cycle. Two concurrent writes that
// each add half of a cycle are serialized by that lock, so the second sees
// the first's edges and is refused.

// cycleEdgesIn says whether r is the downstream end of a deletion edge:
// it has an owner, or a block or cascade reference.
func cycleEdgesIn(r *catalog.Resource) bool {
	if len(r.Owners) > 0 {
		return true
	}
	for _, ref := range r.References {
		if ref.OnTargetDelete == catalog.RefBlock || ref.OnTargetDelete == catalog.RefCascade {
			return true
		}
	}
	return false
}

// grewEdges reports whether next has a deletion edge that cur has not: a
// write that only removes edges (or keeps them) cannot close a cycle, and
// is not checked (a collector writing the condition of a resource already
// on a cycle must not be refused).
func grewEdges(cur, next *catalog.Resource) bool {
	for _, o := range next.Owners {
		if !slices.ContainsFunc(cur.Owners, func(c catalog.OwnerRef) bool { return c.UID == o.UID }) {
			return true
		}
	}
	for _, ref := range next.References {
		if ref.OnTargetDelete != catalog.RefBlock && ref.OnTargetDelete != catalog.RefCascade {
			continue
		}
		if !slices.ContainsFunc(cur.References, func(c catalog.Reference) bool {
			return c.Kind == ref.Kind && c.Namespace == ref.Namespace && c.Name == ref.Name && c.OnTargetDelete == ref.OnTargetDelete
		}) {
			return true
		}
	}
	return false
}

// cycleChunk bounds the placeholders of one IN list.
const cycleChunk = 500

func placeholders(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+1))
	}
	return b.String()
}

func anyArgs(uids []string) []any {
	out := make([]any, len(uids))
	for i, u := range uids {
		out[i] = u
	}
	return out
}

// checkCycles returns a *catalog.CycleError when one of rs (written in
// q's transaction) is on a deletion cycle. Only a resource with an edge
// in (an owner, a block or cascade reference) and one out (a dependent,
// a block or cascade referrer) can be on one: one query per chunk of rs
// finds those, and each is then walked upwards, through its owners and
// the targets of its references, one query per level.
func (s *Store) checkCycles(ctx context.Context, q Querier, rs []*catalog.Resource) error {
	var cand []string
	for _, r := range rs {
		if cycleEdgesIn(r) {
			cand = append(cand, r.UID)
		}
	}
	return s.checkCycleCandidates(ctx, q, cand)
}

// checkCycleCandidates is checkCycles for the uids of resources with an
// edge in, in any number of chunks.
func (s *Store) checkCycleCandidates(ctx context.Context, q Querier, cand []string) error {
	var out []string
	for chunk := range slices.Chunk(cand, cycleChunk) {
		in := placeholders(len(chunk))
		err := q.QueryBatch(ctx, []Stmt{
			{SQL: `SELECT DISTINCT owner_uid FROM owner_edges WHERE owner_uid IN (` + in + `)`, Args: anyArgs(chunk)},
			{SQL: `SELECT DISTINCT r.uid FROM resources r JOIN reference_edges e ON e.target_kind = r.kind
AND e.target_namespace = r.namespace AND e.target_name = r.name
WHERE r.uid IN (` + in + `) AND e.on_target_delete IN ('block', 'cascade')`, Args: anyArgs(chunk)},
		}, func(_ int, rows Rows) error {
			for rows.Next() {
				var uid string
				if err := rows.Scan(&uid); err != nil {
					return err
				}
				out = append(out, uid)
			}
			return rows.Err()
		})
		if err != nil {
			return err
		}
	}
	slices.Sort(out)
	on, err := s.nodeOnACycle(ctx, q, slices.Compact(out))
	if err != nil || on == "" {
		return err
	}
	edges, err := s.cycleThrough(ctx, q, on)
	if err != nil {
		return err
	}
	if edges == nil {
		return fmt.Errorf("catalog: %s is on a cycle of the graph, but no walk from it finds one", termtext.Quote(on))
	}
	return &catalog.CycleError{Edges: edges}
}

// nodeOnACycle walks upwards from every start at once, reading each
// resource's owners and block or cascade targets once, and returns a
// resource on a cycle of what it read, or "". One walk for all the
// starts keeps a write of a long chain (each link a start) linear: a walk
// per start read the chain above it again for each.
func (s *Store) nodeOnACycle(ctx context.Context, q Querier, starts []string) (string, error) {
	up := map[string][]string{} // a resource → its parents, as read
	frontier := starts
	for _, u := range starts {
		up[u] = nil
	}
	for len(frontier) > 0 {
		var next []string
		for chunk := range slices.Chunk(frontier, cycleChunk) {
			in := placeholders(len(chunk))
			err := q.QueryBatch(ctx, []Stmt{
				{SQL: `SELECT dependent_uid, owner_uid FROM owner_edges WHERE dependent_uid IN (` + in + `)`, Args: anyArgs(chunk)},
				{SQL: `SELECT e.referrer_uid, r.uid FROM reference_edges e JOIN resources r
ON r.kind = e.target_kind AND r.namespace = e.target_namespace AND r.name = e.target_name
WHERE e.referrer_uid IN (` + in + `) AND e.on_target_delete IN ('block', 'cascade')`, Args: anyArgs(chunk)},
			}, func(_ int, rows Rows) error {
				for rows.Next() {
					var child, parent string
					if err := rows.Scan(&child, &parent); err != nil {
						return err
					}
					up[child] = append(up[child], parent)
					if _, seen := up[parent]; !seen {
						up[parent] = nil
						next = append(next, parent)
					}
				}
				return rows.Err()
			})
			if err != nil {
				return "", err
			}
		}
		frontier = next
	}
	// A depth-first search of what was read: an edge back to a resource
	// on the current path closes a cycle.
	const (
		white = iota
		grey
		black
	)
	colour := make(map[string]int, len(up))
	type frame struct {
		u    string
		next int
	}
	for _, root := range slices.Sorted(maps.Keys(up)) {
		if colour[root] != white {
			continue
		}
		colour[root] = grey
		stack := []frame{{u: root}}
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.next == len(up[top.u]) {
				colour[top.u] = black
				stack = stack[:len(stack)-1]
				continue
			}
			v := up[top.u][top.next]
			top.next++
			switch colour[v] {
			case grey:
				return v, nil
			case white:
				colour[v] = grey
				stack = append(stack, frame{u: v})
			}
		}
	}
	return "", nil
}

// cycleThrough walks upwards from start and returns the cycle through it,
// in the direction a deletion travels, or nil.
func (s *Store) cycleThrough(ctx context.Context, q Querier, start string) ([]catalog.CycleEdge, error) {
	type hop struct{ child, via string }
	// up[u] is the edge u → child by which u was reached.
	up := map[string]hop{}
	var path []hop // start → ...: filled when the walk comes back
	var closing hop
	frontier := []string{start}
	for len(frontier) > 0 && path == nil {
		var next []string
		for chunk := range slices.Chunk(frontier, cycleChunk) {
			in := placeholders(len(chunk))
			err := q.QueryBatch(ctx, []Stmt{
				{SQL: `SELECT dependent_uid, owner_uid, 'owner' FROM owner_edges WHERE dependent_uid IN (` + in + `)`, Args: anyArgs(chunk)},
				{SQL: `SELECT e.referrer_uid, r.uid, e.on_target_delete FROM reference_edges e JOIN resources r
ON r.kind = e.target_kind AND r.namespace = e.target_namespace AND r.name = e.target_name
WHERE e.referrer_uid IN (` + in + `) AND e.on_target_delete IN ('block', 'cascade')`, Args: anyArgs(chunk)},
			}, func(_ int, rows Rows) error {
				for rows.Next() {
					var child, parent, via string
					if err := rows.Scan(&child, &parent, &via); err != nil {
						return err
					}
					if path != nil {
						continue
					}
					if parent == start {
						closing = hop{child, via}
						path = []hop{}
						continue
					}
					if _, seen := up[parent]; !seen {
						up[parent] = hop{child, via}
						next = append(next, parent)
					}
				}
				return rows.Err()
			})
			if err != nil {
				return nil, err
			}
			if path != nil {
				break
			}
		}
		frontier = next
	}
	if path == nil {
		return nil, nil
	}
	type edge struct{ from, to, via string }
	edges := []edge{{start, closing.child, closing.via}}
	for u := closing.child; u != start && len(edges) <= len(up)+1; {
		h := up[u]
		edges = append(edges, edge{u, h.child, h.via})
		u = h.child
	}
	uids := []string{}
	for _, e := range edges {
		uids = append(uids, e.from)
	}
	keys := map[string]catalog.Key{}
	rows, err := q.Query(ctx, `SELECT uid, kind, namespace, name FROM resources WHERE uid IN (`+placeholders(len(uids))+`)`, anyArgs(uids)...)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var uid string
		var k catalog.Key
		if err := rows.Scan(&uid, &k.Kind, &k.Namespace, &k.Name); err != nil {
			rows.Close()
			return nil, err
		}
		keys[uid] = k
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	key := func(uid string) catalog.Key {
		if k, ok := keys[uid]; ok {
			return k
		}
		return catalog.Key{Kind: "(uid)", Name: uid}
	}
	out := make([]catalog.CycleEdge, len(edges))
	for i, e := range edges {
		out[i] = catalog.CycleEdge{From: key(e.from), To: key(e.to), Via: e.via}
	}
	return out, nil
}
