package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
)

// planPrunes finds the members a bundle owns in the catalog that its new
// spec no longer lists.
func (e *Engine) planPrunes(ctx context.Context, p *plan, b *item) error {
	if b.cur == nil || b.skipped {
		return nil
	}
	deps, err := e.st.Dependents(ctx, b.cur.UID)
	if err != nil {
		return err
	}
	for _, r := range deps {
		if it, ok := p.byKey[r.Key()]; ok && it.bundle == b {
			continue
		}
		ch := &Change{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, Bundle: b.key().String(),
			UID: r.UID, Phase: r.Phase, ResourceVersion: r.ResourceVersion, DueAt: r.DeletionDueAt}
		var others int
		for _, o := range r.Owners {
			if o.UID != b.cur.UID {
				others++
			}
		}
		delay, hasDelay := time.Duration(0), false
		if v, ok := r.Annotations[catalog.AnnotationDeletionDelay]; ok {
			d, err := backup.ParseDuration(v)
			if err != nil {
				return refuse(fmt.Errorf("%s (pruned from %s): annotation %s: %v", r.Key(), b.key(), catalog.AnnotationDeletionDelay, err))
			}
			delay, hasDelay = d, true
		}
		switch {
		// Pruned by an earlier apply: nothing is written for it, so it
		// is unchanged (the reason says how far its deletion is).
		case r.Phase == catalog.PhaseDeleting:
			ch.Action, ch.Reason = Unchanged, "pruned earlier; Deleting"
			p.settled[ch] = true
		case r.Phase == catalog.PhaseScheduled:
			ch.Action, ch.Reason = Unchanged, "pruned earlier; counting down"
			p.settled[ch] = true
		case others > 0:
			owners := "owners"
			if others == 1 {
				owners = "owner"
			}
			ch.Action, ch.Reason = Released, fmt.Sprintf("pruned from its bundle; it keeps %d other %s", others, owners)
		case hasDelay:
			due := e.now().Add(delay)
			ch.Action, ch.DueAt, ch.Phase = Scheduled, &due, catalog.PhaseScheduled
			ch.Reason = fmt.Sprintf("pruned from its bundle; %s=%s", catalog.AnnotationDeletionDelay, r.Annotations[catalog.AnnotationDeletionDelay])
		default:
			ch.Action, ch.Phase, ch.Reason = Deleted, catalog.PhaseDeleting, "pruned from its bundle"
		}
		p.prunes = append(p.prunes, ch)
	}
	return nil
}

// checkPrunes asks a PruneChecker about every member to delete.
func (e *Engine) checkPrunes(ctx context.Context, p *plan) error {
	c, ok := e.pruner.(PruneChecker)
	if !ok {
		return nil
	}
	for _, ch := range p.prunes {
		if ch.Action != Deleted || p.settled[ch] {
			continue
		}
		if err := c.CheckDelete(ctx, ch.Key()); err != nil {
			return fmt.Errorf("pruning %s: %w; nothing applied", ch.Key(), err)
		}
	}
	return nil
}

// prune carries the planned prunes out.
func (e *Engine) prune(ctx context.Context, p *plan) error {
	for _, ch := range p.prunes {
		if p.settled[ch] {
			continue
		}
		k := ch.Key()
		switch ch.Action {
		case Released:
			r, err := e.st.Get(ctx, k)
			if err != nil {
				return fmt.Errorf("pruning %s: %w", k, err)
			}
			r.Owners = slices.DeleteFunc(r.Owners, func(o catalog.OwnerRef) bool { return o.Kind == manifest.KindBundle })
			if r, err = e.st.Update(ctx, r); err != nil {
				return fmt.Errorf("pruning %s: %w (apply again to finish)", k, err)
			}
			ch.ResourceVersion = r.ResourceVersion
		case Scheduled:
			r, err := e.st.Get(ctx, k)
			if err != nil {
				return fmt.Errorf("pruning %s: %w", k, err)
			}
			delay, _ := backup.ParseDuration(r.Annotations[catalog.AnnotationDeletionDelay])
			r, err = e.st.Schedule(ctx, k, catalog.ScheduleOptions{Delay: delay, Propagation: catalog.PropagationForeground,
				Reason: "pruned from " + ch.Bundle})
			if err != nil {
				return fmt.Errorf("pruning %s: %w (apply again to finish)", k, err)
			}
			ch.Phase, ch.DueAt, ch.ResourceVersion = r.Phase, r.DeletionDueAt, r.ResourceVersion
		case Deleted:
			if err := e.pruner.Delete(ctx, k); err != nil {
				return fmt.Errorf("pruning %s: %w (apply again to finish)", k, err)
			}
			if r, err := e.st.Get(ctx, k); err == nil {
				ch.Phase, ch.ResourceVersion = r.Phase, r.ResourceVersion
			} else if errors.Is(err, catalog.ErrNotFound) {
				ch.Phase = catalog.PhasePurged
			}
		}
	}
	return nil
}
