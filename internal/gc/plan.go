package gc

import (
	"context"
	"errors"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

// Plan actions.
const (
	ActionDelete   = "delete"   // enters Deleting, then purged
	ActionOrphan   = "orphan"   // loses the owner edge, stays (Orphan propagation)
	ActionUnlink   = "unlink"   // loses the owner edge, stays: another owner remains
	ActionUnset    = "unset"    // its reference to a deleted target is removed
	ActionBlocked  = "blocked"  // holds a block reference: the target waits for it
	ActionDangling = "dangling" // keeps an allowDangling reference to a purged target
	// ActionSchedule: reached by the cascade, it keeps its own grace window
	// (lethe.io/deletion-delay): Scheduled first, undeletable until the
	// window ends, then deleted (its own cascade then).
	ActionSchedule = "schedule"
)

// PlanEntry is what the cascade does to one resource.
type PlanEntry struct {
	Resource catalog.Key `json:"resource"`
	Action   string      `json:"action"`
	// Phase is the resource's phase now.
	Phase  catalog.Phase `json:"phase"`
	Reason string        `json:"reason,omitempty"`
	// Plugins are the plugins that would run on it, in order.
	Plugins []string `json:"plugins,omitempty"`
}

// Plan is what deleting a resource would do, resource by resource.
type Plan struct {
	Root        catalog.Key `json:"root"`
	Propagation Propagation `json:"propagation"`
	Entries     []PlanEntry `json:"entries"`
	// ScheduledUntil is set when the request only scheduled the deletion
	// (grace window).
	ScheduledUntil *time.Time `json:"scheduledUntil,omitempty"`
}

// Count returns how many entries have the action.
func (p *Plan) Count(action string) int {
	n := 0
	for _, e := range p.Entries {
		if e.Action == action {
			n++
		}
	}
	return n
}

// Plan computes, without changing anything, what deleting k with the
// propagation policy would do: every resource deleted, orphaned,
// unlinked, unset or blocked, and the plugins that would run on each.
func (c *Collector) Plan(ctx context.Context, k catalog.Key, prop Propagation) (*Plan, error) {
	return c.plan(ctx, k, prop, false)
}

// plan is Plan; with force, the cascade skips the grace windows it reaches.
func (c *Collector) plan(ctx context.Context, k catalog.Key, prop Propagation, force bool) (*Plan, error) {
	if prop == "" {
		prop = Foreground
	}
	root, err := c.st.Get(ctx, k)
	if err != nil {
		return nil, err
	}
	p := &Plan{Root: k, Propagation: prop}
	deleted := map[string]bool{}
	type todo struct {
		r      *catalog.Resource
		prop   Propagation
		reason string
	}
	type blockRef struct {
		target, referrer *catalog.Resource
	}
	var blocks []blockRef
	// A resource is marked deleted when queued, so that an owner queued
	// but not yet visited does not count as remaining.
	queue := []todo{{root, prop, "requested"}}
	deleted[root.UID] = true
	// again are the resources an edge of the cascade reaches a second
	// time: a cycle of the cascade, if any, goes through one of them.
	var again []*catalog.Resource
	push := func(t todo) {
		if !deleted[t.r.UID] {
			deleted[t.r.UID] = true
			queue = append(queue, t)
			return
		}
		again = append(again, t.r)
	}
	rootMark := &catalog.Resource{}
	if force {
		rootMark.Annotations = map[string]string{AnnotationCascadeForce: "true"}
	}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		if t.r.UID != root.UID && t.r.Phase != catalog.PhaseDeleting && c.inGrace(rootMark, t.r) {
			why := t.reason + " (" + string(t.prop) + "); Scheduled first for its own grace window"
			if t.r.Phase == catalog.PhaseScheduled && t.r.DeletionDueAt != nil {
				why += ", until " + t.r.DeletionDueAt.UTC().Format(time.RFC3339)
			} else {
				why += " (" + catalog.AnnotationDeletionDelay + "=" + t.r.Annotations[catalog.AnnotationDeletionDelay] + ")"
			}
			p.Entries = append(p.Entries, PlanEntry{Resource: t.r.Key(), Action: ActionSchedule, Phase: t.r.Phase, Reason: why, Plugins: c.planPlugins(t.r)})
			continue // its own cascade comes after its window
		}
		reason := t.reason + " (" + string(t.prop) + ")"
		if force && t.r.UID != root.UID && (graceOf(t.r) > 0 || t.r.Phase == catalog.PhaseScheduled) {
			reason += "; its grace window skipped (--force)"
		}
		p.Entries = append(p.Entries, PlanEntry{Resource: t.r.Key(), Action: ActionDelete, Phase: t.r.Phase, Reason: reason, Plugins: c.planPlugins(t.r)})
		deps, err := c.st.Dependents(ctx, t.r.UID)
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			if ownerEdge(d, t.r.UID) == nil {
				continue
			}
			if deleted[d.UID] {
				again = append(again, d)
				continue
			}
			if t.prop == Orphan {
				p.Entries = append(p.Entries, PlanEntry{Resource: d.Key(), Action: ActionOrphan, Phase: d.Phase, Reason: "dependent of " + t.r.Key().String()})
				continue
			}
			var remaining []string
			for _, o := range d.Owners {
				if o.UID == t.r.UID || deleted[o.UID] {
					continue
				}
				or, err := c.st.GetByUID(ctx, o.UID)
				if errors.Is(err, catalog.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, err
				}
				if or.Phase != catalog.PhaseDeleting {
					remaining = append(remaining, or.Key().String())
				}
			}
			if len(remaining) > 0 {
				p.Entries = append(p.Entries, PlanEntry{Resource: d.Key(), Action: ActionUnlink, Phase: d.Phase,
					Reason: "loses its owner " + t.r.Key().String() + "; still owned by " + joinKeys(remaining)})
				continue
			}
			next := Background
			if t.prop == Foreground {
				next = Foreground
			}
			push(todo{d, next, "dependent of " + t.r.Key().String()})
		}
		refs, err := c.st.Referrers(ctx, t.r.Key())
		if err != nil {
			return nil, err
		}
		for _, x := range refs {
			for _, ref := range refsTo(x, t.r) {
				switch ref.OnTargetDelete {
				case catalog.RefBlock:
					blocks = append(blocks, blockRef{t.r, x})
				case catalog.RefUnset:
					p.Entries = append(p.Entries, PlanEntry{Resource: x.Key(), Action: ActionUnset, Phase: x.Phase, Reason: "its reference to " + t.r.Key().String() + " is removed"})
				case catalog.RefCascade:
					xp := Propagation(x.PropagationPolicy)
					if xp == "" {
						xp = Foreground
					}
					push(todo{x, xp, "cascade reference to " + t.r.Key().String()})
				case catalog.RefAllowDangling:
					p.Entries = append(p.Entries, PlanEntry{Resource: x.Key(), Action: ActionDangling, Phase: x.Phase, Reason: "keeps its reference to " + t.r.Key().String() + " (allowDangling)"})
				}
			}
		}
	}
	// A cycle of waits in the cascade: none of its resources could be
	// purged. Each cycle is listed once, as blocked, by its first resource.
	cycles := map[string]bool{}
	for _, b := range blocks {
		if deleted[b.referrer.UID] {
			again = append(again, b.referrer)
		}
	}
	for _, r := range again {
		cyc, err := c.cycleThrough(ctx, r)
		if err != nil {
			return nil, err
		}
		if cyc == nil {
			continue
		}
		line := catalog.FormatCycle(cyc)
		if cycles[line] {
			continue
		}
		cycles[line] = true
		first := catalog.Canonical(cyc)[0].From
		phase := r.Phase
		if x, err := c.st.Get(ctx, first); err == nil {
			phase = x.Phase
		}
		p.Entries = append(p.Entries, PlanEntry{Resource: first, Action: ActionBlocked, Phase: phase,
			Reason: line + ": none of them can be purged before the others"})
	}
	for _, b := range blocks {
		if deleted[b.referrer.UID] {
			continue // deleted in the same cascade: the target waits for it
		}
		p.Entries = append(p.Entries, PlanEntry{Resource: b.referrer.Key(), Action: ActionBlocked, Phase: b.referrer.Phase,
			Reason: "holds a block reference to " + b.target.Key().String() + ", which waits until it is gone"})
	}
	return p, nil
}

func (c *Collector) planPlugins(r *catalog.Resource) []string {
	if r.Kind == BackupKind {
		return nil // the backup deletion pipeline runs a backup's items
	}
	return c.selecting(r)
}

func joinKeys(ks []string) string {
	out := ""
	for i, k := range ks {
		if i > 0 {
			out += ", "
		}
		out += k
	}
	return out
}
