package apply

import (
	"context"
	"errors"

	"github.com/lethehq/lethe/internal/catalog"
)

// checkCycles refuses a cycle of deletion edges (owner edges, block and
// cascade references, in any mix: catalog.CycleError), from the planned
// resources and the stored ones: walking upwards from a planned resource
// (through its owners and the targets of its block and cascade
// references) must never come back to it. The catalog checks the same
// again inside the write's transaction, so that two applies racing
// cannot store one; this check says it before anything is written, dry
// run included.
func (e *Engine) checkCycles(ctx context.Context, p *plan, step func()) error {
	if step == nil {
		step = func() {}
	}
	nodes := map[string]*cycleNode{}
	// uidOf follows a reference by its target's key, as the catalog's
	// check in the write does (its reference edges name no uid): a
	// reference whose uid is not its target's still holds it.
	uidOf := func(k catalog.Key) (string, error) {
		if it, ok := p.byKey[k]; ok {
			if uid, _, _, ok := it.planned(); ok {
				return uid, nil
			}
			switch {
			case it.cur != nil:
				return it.cur.UID, nil
			}
			return "", nil
		}
		r, err := e.st.Get(ctx, k)
		if errors.Is(err, catalog.ErrNotFound) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return r.UID, nil
	}
	mk := func(key catalog.Key, owners []catalog.OwnerRef, refs []catalog.Reference) (*cycleNode, error) {
		n := &cycleNode{key: key}
		for _, o := range owners {
			n.ups = append(n.ups, cycleUp{o.UID, catalog.ViaOwner})
		}
		for _, ref := range refs {
			via := catalog.ViaBlock
			switch ref.OnTargetDelete {
			case catalog.RefBlock:
			case catalog.RefCascade:
				via = catalog.ViaCascade
			default:
				continue
			}
			uid, err := uidOf(catalog.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name})
			if err != nil {
				return nil, err
			}
			if uid != "" {
				n.ups = append(n.ups, cycleUp{uid, via})
			}
		}
		return n, nil
	}
	for _, it := range p.items {
		var n *cycleNode
		var uid string
		var err error
		puid, owners, refs, planned := it.planned()
		switch {
		case planned:
			uid = puid
			n, err = mk(it.key(), owners, refs)
		case it.cur != nil:
			uid = it.cur.UID
			n, err = mk(it.key(), it.cur.Owners, it.cur.References)
		default:
			continue
		}
		if err != nil {
			return err
		}
		if len(n.ups) == 0 {
			n = nil // no edge to follow; most of a large apply
		}
		nodes[uid] = n
	}
	get := func(uid string) (*cycleNode, error) {
		if n, ok := nodes[uid]; ok {
			return n, nil
		}
		r, err := e.st.GetByUID(ctx, uid)
		if errors.Is(err, catalog.ErrNotFound) {
			nodes[uid] = nil // gone: no edge to follow
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		n, err := mk(r.Key(), r.Owners, r.References)
		nodes[uid] = n
		return n, err
	}
	onCycle, err := cycleNodes(p, nodes, get, step)
	if err != nil {
		return err
	}
	for _, it := range p.items {
		start, _, _, planned := it.planned()
		if !planned || nodes[start] == nil || !onCycle[start] {
			continue // on no cycle
		}
		// reached[u] is the edge u → child by which the walk reached u.
		type hop struct{ child, via string }
		reached := map[string]hop{}
		frontier := []string{start}
		var closing *hop
		for len(frontier) > 0 && closing == nil {
			var next []string
			for _, uid := range frontier {
				step()
				n, err := get(uid)
				if err != nil {
					return err
				}
				if n == nil {
					continue
				}
				for _, u := range n.ups {
					if u.uid == start {
						closing = &hop{uid, u.via}
						break
					}
					if _, seen := reached[u.uid]; !seen {
						reached[u.uid] = hop{uid, u.via}
						next = append(next, u.uid)
					}
				}
				if closing != nil {
					break
				}
			}
			frontier = next
		}
		if closing == nil {
			continue
		}
		key := func(uid string) catalog.Key {
			if n := nodes[uid]; n != nil {
				return n.key
			}
			return catalog.Key{Kind: "(uid)", Name: uid}
		}
		edges := []catalog.CycleEdge{{From: key(start), To: key(closing.child), Via: closing.via}}
		for u := closing.child; u != start && len(edges) <= len(reached)+1; {
			h := reached[u]
			edges = append(edges, catalog.CycleEdge{From: key(u), To: key(h.child), Via: h.via})
			u = h.child
		}
		field := "metadata.ownerReferences"
		if edges[len(edges)-1].Via != catalog.ViaOwner {
			field = "references"
		}
		return refuse(&cycleRefusal{it.document().Errorf(field, "%s: none of them could ever be purged", catalog.FormatCycle(edges)), &catalog.CycleError{Edges: edges}})
	}
	return nil
}

// cycleUp is an edge up from a resource: to an owner, or to the target of
// a block or cascade reference.
type cycleUp struct {
	uid string // the upstream end
	via string
}

// cycleNode is a resource as the cycle check sees it: nil when it has no
// edge up.
type cycleNode struct {
	key catalog.Key
	ups []cycleUp
}

// cycleNodes returns the resources on a cycle (a strongly connected part
// of the graph of more than one, or one with an edge to itself), among
// those reachable upwards from the planned resources. It visits each
// once (Tarjan's algorithm, without recursion): a walk from each planned
// resource, as the check did, read a long chain once per link.
func cycleNodes(p *plan, nodes map[string]*cycleNode, get func(uid string) (*cycleNode, error), step func()) (map[string]bool, error) {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	onCycle := map[string]bool{}
	type frame struct {
		u   string
		ups []cycleUp
		i   int
	}
	var calls []frame
	visit := func(u string) error {
		step()
		index[u], low[u] = len(index), len(index)
		stack = append(stack, u)
		onStack[u] = true
		n, err := get(u)
		if err != nil {
			return err
		}
		var ups []cycleUp
		if n != nil {
			ups = n.ups
		}
		calls = append(calls, frame{u: u, ups: ups})
		return nil
	}
	for _, it := range p.items {
		start, _, _, planned := it.planned()
		if !planned || nodes[start] == nil {
			continue
		}
		if _, seen := index[start]; seen {
			continue
		}
		if err := visit(start); err != nil {
			return nil, err
		}
		for len(calls) > 0 {
			top := &calls[len(calls)-1]
			if top.i < len(top.ups) {
				v := top.ups[top.i].uid
				top.i++
				switch _, seen := index[v]; {
				case v == top.u:
					onCycle[v] = true
				case !seen:
					if err := visit(v); err != nil {
						return nil, err
					}
				case onStack[v]:
					low[top.u] = min(low[top.u], index[v])
				}
				continue
			}
			u := top.u
			calls = calls[:len(calls)-1]
			if low[u] == index[u] {
				i := len(stack) - 1
				for stack[i] != u {
					i--
				}
				scc := stack[i:]
				for _, w := range scc {
					onStack[w] = false
					if len(scc) > 1 {
						onCycle[w] = true
					}
				}
				stack = stack[:i]
			}
			if len(calls) > 0 {
				parent := calls[len(calls)-1].u
				low[parent] = min(low[parent], low[u])
			}
		}
	}
	return onCycle, nil
}

// cycleRefusal is a cycle found while planning: the document's error, and
// errors.Is(err, catalog.ErrCycle).
type cycleRefusal struct {
	doc   error
	cycle *catalog.CycleError
}

func (e *cycleRefusal) Error() string   { return e.doc.Error() }
func (e *cycleRefusal) Unwrap() []error { return []error{e.doc, e.cycle} }
