package gc

import (
	"context"
	"errors"

	"github.com/lethehq/lethe/internal/catalog"
)

// ReasonCycle is the DeletionStuck reason of a resource on a cycle of
// waits: owner edges with blockOwnerDeletion, block and cascade
// references, in any mix. Every resource of the cycle reports it with the
// same one line (catalog.FormatCycle), and the audit log gets one
// deletion-cycle entry for it.
const ReasonCycle = "Cycle"

// AuditCycle is the audit action of a cycle found by the collector.
const AuditCycle = "deletion-cycle"

// waitsUpon lists who waits for u's purge, each with the edge: its owners
// by a blockOwnerDeletion edge, and the targets of its block and cascade
// references (the target of a block reference cannot be purged while u
// exists; the target of a cascade reference waits, under Foreground, for
// u to be purged).
func (c *Collector) waitsUpon(ctx context.Context, u *catalog.Resource) ([]*catalog.Resource, []string, error) {
	var out []*catalog.Resource
	var via []string
	for _, o := range u.Owners {
		if !o.BlockOwnerDeletion {
			continue
		}
		or, err := c.st.GetByUID(ctx, o.UID)
		if errors.Is(err, catalog.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		out, via = append(out, or), append(via, catalog.ViaOwner)
	}
	for _, ref := range u.References {
		v := catalog.ViaBlock
		switch ref.OnTargetDelete {
		case catalog.RefBlock:
		case catalog.RefCascade:
			v = catalog.ViaCascade
		default:
			continue
		}
		t, err := c.st.Get(ctx, catalog.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name})
		if errors.Is(err, catalog.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if ref.UID != "" && ref.UID != t.UID {
			continue
		}
		out, via = append(out, t), append(via, v)
	}
	return out, via, nil
}

// maxCycleWalk bounds the resources one cycle search reads.
const maxCycleWalk = 4096

// cycleThrough walks upwards from r (who waits for it, who waits for
// those...) and returns the cycle of waits through r, in the direction a
// deletion travels (each edge's From waits for its To), or nil.
func (c *Collector) cycleThrough(ctx context.Context, r *catalog.Resource) ([]catalog.CycleEdge, error) {
	type hop struct {
		child *catalog.Resource
		via   string
	}
	reached := map[string]hop{} // reached[u] is the edge u → child by which the walk reached u
	keys := map[string]catalog.Key{r.UID: r.Key()}
	frontier := []*catalog.Resource{r}
	for len(frontier) > 0 && len(reached) < maxCycleWalk {
		var next []*catalog.Resource
		for _, u := range frontier {
			ups, via, err := c.waitsUpon(ctx, u)
			if err != nil {
				return nil, err
			}
			for i, p := range ups {
				if p.UID == r.UID {
					edges := []catalog.CycleEdge{{From: r.Key(), To: u.Key(), Via: via[i]}}
					for x := u; x.UID != r.UID && len(edges) <= len(reached)+1; {
						h := reached[x.UID]
						edges = append(edges, catalog.CycleEdge{From: x.Key(), To: h.child.Key(), Via: h.via})
						x = h.child
					}
					return edges, nil
				}
				if _, seen := reached[p.UID]; !seen {
					reached[p.UID] = hop{u, via[i]}
					keys[p.UID] = p.Key()
					next = append(next, p)
				}
			}
		}
		frontier = next
	}
	return nil, nil
}
