package gc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// result is what one step of a resource came to.
type result struct {
	// done: the resource is purged, or not Deleting: nothing left to do.
	done bool
	// next is when to look again (zero: Recheck).
	next time.Time
	// stuck is the chain of blockers when the resource waits on something
	// that is not itself being deleted.
	stuck *stuckInfo
}

// stuckInfo is why a resource is stuck: a short reason and the chain.
type stuckInfo struct {
	reason string
	chain  []string
	// cycle is the cycle of a ReasonCycle, canonical (catalog.Canonical).
	cycle []catalog.CycleEdge
}

func (s *stuckInfo) message() string { return strings.Join(s.chain, " → ") }

// waits collects what a Deleting resource waits for in one step.
type waits struct {
	dependents []*catalog.Resource // blockOwnerDeletion dependents (Foreground)
	referrers  []*catalog.Resource // block referrers
	// cascaders are the referrers holding a cascade reference to it that
	// are not purged yet (Foreground: it waits for them, as Goten's
	// deleted resource waits for its back-references to be handled).
	cascaders []*catalog.Resource
	plugin    string // the first unfinished plugin, with its state
	// pluginLeft: the delete-actions finalizer is still there (a plugin
	// waits in the retry queue).
	pluginLeft bool
	stuck      *stuckInfo
}

// step carries one resource's deletion as far as it can go now. It reads
// the live resource first (the catalog is the truth), and every write it
// makes is conditional (resourceVersion, lifecycle) and runs under the
// caller's fence, if any. depth counts inline steps of dependents.
func (c *Collector) step(ctx context.Context, uid string, depth int) (result, error) {
	r, err := c.st.GetByUID(ctx, uid)
	if errors.Is(err, catalog.ErrNotFound) {
		return result{done: true}, c.ownerGone(ctx, uid, nil, depth)
	}
	if err != nil {
		return result{}, err
	}
	if r.Phase != catalog.PhaseDeleting {
		return result{done: true}, nil
	}
	return c.stepResource(ctx, r, depth)
}

// inlineKey is the context key of the resources being stepped further up
// the same inline chain: a resource is never stepped inline inside its
// own step (on a cycle, each step would step the other, with what it
// read, down to MaxInlineDepth).
type inlineKey struct{}

func onInlinePath(ctx context.Context, uid string) bool {
	p, _ := ctx.Value(inlineKey{}).(*inlinePath)
	for ; p != nil; p = p.up {
		if p.uid == uid {
			return true
		}
	}
	return false
}

type inlinePath struct {
	uid string
	up  *inlinePath
}

// passKey is the context key of the resources one pass (one step of a
// claimed item, with the steps it makes inline) has stepped already, with
// what each came to. A resource several of the pass's resources wait for
// (a diamond of owners: each layer owned by both of the layer above) is
// stepped once and its result reused: stepping it again for each parent
// would step what it waits for again too, once per path through the
// graph, 2^layers.
type passKey struct{}

type pass struct {
	stepped map[string]result
}

// steppedInPass returns what r's step came to earlier in this pass.
func steppedInPass(ctx context.Context, uid string) (result, bool) {
	p, _ := ctx.Value(passKey{}).(*pass)
	if p == nil {
		return result{}, false
	}
	res, ok := p.stepped[uid]
	return res, ok
}

// inPass returns ctx with a pass of its own, unless it has one.
func inPass(ctx context.Context) (context.Context, *pass) {
	if p, _ := ctx.Value(passKey{}).(*pass); p != nil {
		return ctx, p
	}
	p := &pass{stepped: map[string]result{}}
	return context.WithValue(ctx, passKey{}, p), p
}

func (c *Collector) stepResource(ctx context.Context, r *catalog.Resource, depth int) (result, error) {
	ctx, p := inPass(ctx)
	res, err := c.stepResourceOnce(ctx, r, depth)
	if err == nil {
		p.stepped[r.UID] = res
	}
	return res, err
}

func (c *Collector) stepResourceOnce(ctx context.Context, r *catalog.Resource, depth int) (result, error) {
	up, _ := ctx.Value(inlineKey{}).(*inlinePath)
	ctx = context.WithValue(ctx, inlineKey{}, &inlinePath{uid: r.UID, up: up})
	var w waits
	policy := Propagation(r.PropagationPolicy)
	if policy == "" {
		policy = Foreground
	}
	cascading := slices.Contains(r.Finalizers, catalog.FinalizerCascade)

	// 1. Dependents, by the owner's propagation policy.
	var entered []*catalog.Resource
	{
		// Dependents that can go at once (no finalizer, dependent, plugin
		// or held reference) are deleted and purged in one batch; those
		// the catalog finds held take the step by step path.
		var fast []catalog.CollectItem
		slow := map[string]*catalog.Resource{}
		// The dependents to move to Deleting, in one write at the end.
		var pend []pendingEnter
		// Dependents enter Deleting Foreground under a Foreground owner,
		// Background otherwise.
		childProp := Background
		if policy == Foreground {
			childProp = Foreground
		}
		deps, err := c.st.Dependents(ctx, r.UID)
		if err != nil {
			return result{}, err
		}
		for _, d := range deps {
			edge := ownerEdge(d, r.UID)
			if edge == nil {
				continue
			}
			if policy == Orphan {
				if err := c.unlink(ctx, d, r, "orphaned: owner "+r.Key().String()+" deleted with Orphan propagation"); err != nil {
					return result{}, err
				}
				continue
			}
			block := policy == Foreground && edge.BlockOwnerDeletion
			if d.Phase != catalog.PhaseDeleting && c.inGrace(r, d) {
				// Its own grace window first: Scheduled, undeletable
				// until it ends; a Foreground owner waits for it.
				remaining, err := c.remainingOwners(ctx, d, r.UID)
				if err != nil {
					return result{}, err
				}
				if len(remaining) > 0 {
					if err := c.unlink(ctx, d, r, "owner "+r.Key().String()+" deleted; still owned by "+strings.Join(remaining, ", ")); err != nil {
						return result{}, err
					}
					continue
				}
				nd, err := c.scheduleInCascade(ctx, r, d, childProp, "owner "+r.Key().String()+" deleted ("+string(policy)+")"+inCascadeOf(r))
				if err != nil {
					return result{}, err
				}
				if block {
					w.dependents = append(w.dependents, nd)
				}
				continue
			}
			if d.Phase == catalog.PhaseDeleting {
				if block {
					w.dependents = append(w.dependents, d)
					if !onInlinePath(ctx, d.UID) {
						entered = append(entered, d)
					}
				}
				continue
			}
			remaining, err := c.remainingOwners(ctx, d, r.UID)
			if err != nil {
				return result{}, err
			}
			if len(remaining) > 0 {
				if err := c.unlink(ctx, d, r, "owner "+r.Key().String()+" deleted; still owned by "+strings.Join(remaining, ", ")); err != nil {
					return result{}, err
				}
				continue
			}
			if c.leaf(d) && skipped(r, d) == "" {
				fast = append(fast, catalog.CollectItem{UID: d.UID, ResourceVersion: d.ResourceVersion,
					Reason: "owner " + r.Key().String() + " deleted (" + string(policy) + ")" + inCascadeOf(r) + "; nothing held it"})
				slow[d.UID] = d
				continue
			}
			if forced(r) {
				if d, err = c.markForced(ctx, d); err != nil {
					return result{}, err
				}
			}
			if d.Kind != BackupKind {
				// Moved with the others of the step, in one write.
				pend, entered, w.dependents = c.enterCascadeLater(pend, r, d, childProp,
					"owner "+r.Key().String()+" deleted ("+string(policy)+")"+inCascadeOf(r), block, entered, w.dependents)
				continue
			}
			nd, err := c.enterCascade(ctx, r, d, childProp, "owner "+r.Key().String()+" deleted ("+string(policy)+")"+inCascadeOf(r))
			if errors.Is(err, catalog.ErrInvalidTransition) {
				// Moved on meanwhile (another step moved it to Deleting):
				// still waited for; its next event wakes us.
				if block {
					if w.dependents, err = c.stillThere(ctx, w.dependents, d); err != nil {
						return result{}, err
					}
				}
				continue
			}
			if err != nil {
				return result{}, err
			}
			entered = append(entered, nd)
			if block {
				w.dependents = append(w.dependents, nd)
			}
		}

		if len(fast) > 0 {
			gone, err := c.st.CollectBatch(c.actor(ctx), fast)
			if err != nil {
				return result{}, err
			}
			c.markDone(gone...)
			for _, uid := range gone {
				delete(slow, uid)
			}
			for _, it := range fast {
				d, ok := slow[it.UID]
				if !ok {
					continue
				}
				if forced(r) {
					if d, err = c.markForced(ctx, d); err != nil {
						return result{}, err
					}
				}
				if d.Kind != BackupKind {
					edge := ownerEdge(d, r.UID)
					pend, entered, w.dependents = c.enterCascadeLater(pend, r, d, childProp,
						"owner "+r.Key().String()+" deleted ("+string(policy)+")"+inCascadeOf(r),
						edge != nil && policy == Foreground && edge.BlockOwnerDeletion, entered, w.dependents)
					continue
				}
				nd, err := c.enterCascade(ctx, r, d, childProp, "owner "+r.Key().String()+" deleted ("+string(policy)+")"+inCascadeOf(r))
				if errors.Is(err, catalog.ErrInvalidTransition) {
					if edge := ownerEdge(d, r.UID); edge != nil && policy == Foreground && edge.BlockOwnerDeletion {
						if w.dependents, err = c.stillThere(ctx, w.dependents, d); err != nil {
							return result{}, err
						}
					}
					continue
				}
				if err != nil {
					return result{}, err
				}
				entered = append(entered, nd)
				if edge := ownerEdge(nd, r.UID); edge != nil && policy == Foreground && edge.BlockOwnerDeletion {
					w.dependents = append(w.dependents, nd)
				}
			}
		}
		if entered, w.dependents, err = c.enterBatch(ctx, pend, entered, w.dependents); err != nil {
			return result{}, err
		}
	}

	// 2. Referrers, by each reference's onTargetDelete.
	refs, err := c.st.Referrers(ctx, r.Key())
	if err != nil {
		return result{}, err
	}
	for _, x := range refs {
		for _, ref := range refsTo(x, r) {
			switch ref.OnTargetDelete {
			case catalog.RefBlock:
				w.referrers = append(w.referrers, x)
			case catalog.RefUnset:
				if err := c.unset(ctx, x, r); err != nil {
					return result{}, err
				}
			case catalog.RefCascade:
				if x.Phase != catalog.PhaseDeleting && c.inGrace(r, x) {
					nx, err := c.scheduleInCascade(ctx, r, x, Propagation(x.PropagationPolicy), "cascade reference to "+r.Key().String()+", which is being deleted"+inCascadeOf(r))
					if err != nil {
						return result{}, err
					}
					if policy == Foreground {
						w.cascaders = append(w.cascaders, nx)
					}
					continue
				}
				if x.Phase == catalog.PhaseDeleting {
					if policy == Foreground {
						w.cascaders = append(w.cascaders, x)
						if !onInlinePath(ctx, x.UID) {
							entered = append(entered, x)
						}
					}
					continue
				}
				if forced(r) {
					if x, err = c.markForced(ctx, x); err != nil {
						return result{}, err
					}
				}
				nx, err := c.enterCascade(ctx, r, x, Propagation(x.PropagationPolicy), "cascade reference to "+r.Key().String()+", which is being deleted"+inCascadeOf(r))
				if errors.Is(err, catalog.ErrInvalidTransition) {
					if policy == Foreground {
						if w.cascaders, err = c.stillThere(ctx, w.cascaders, x); err != nil {
							return result{}, err
						}
					}
					continue
				}
				if err != nil {
					return result{}, err
				}
				entered = append(entered, nx)
				if policy == Foreground {
					w.cascaders = append(w.cascaders, nx)
				}
			}
		}
	}

	// 3. Step what the cascade moved to Deleting, in process: their
	// plugins in one batch, then each on its own. What is left waiting
	// keeps its queued item.
	if len(entered) > 0 && depth >= MaxInlineDepth {
		for _, d := range entered {
			if err := c.queueLeft(ctx, d, c.now()); err != nil {
				return result{}, err
			}
		}
	}
	if len(entered) > 0 && depth < MaxInlineDepth {
		// What this pass stepped already (another of its resources
		// waits for it too) is not stepped again: its result stands.
		var fresh []*catalog.Resource
		for _, d := range entered {
			if _, ok := steppedInPass(ctx, d.UID); !ok {
				fresh = append(fresh, d)
			}
		}
		if err := c.runPlugins(ctx, fresh); err != nil {
			return result{}, err
		}
		// Each is stepped as the plugins left it (without the
		// delete-actions finalizer when they are all done): its purge
		// then takes the cascade finalizer in the same write.
		after := make(map[string]*catalog.Resource, len(fresh))
		for _, d := range fresh {
			after[d.UID] = d
		}
		for i, d := range entered {
			if nd, ok := after[d.UID]; ok {
				entered[i] = nd
			}
		}
		gone := map[string]bool{}
		waiting := map[string]*catalog.Resource{}
		for _, d := range entered {
			if d.Phase != catalog.PhaseDeleting {
				continue
			}
			res, seen := steppedInPass(ctx, d.UID)
			if !seen {
				var err error
				if res, err = c.stepResource(ctx, d, depth+1); err != nil {
					return result{}, err
				}
			}
			if res.done {
				gone[d.UID] = true
				continue
			}
			if !seen {
				if err := c.queueLeft(ctx, d, res.next); err != nil {
					return result{}, err
				}
			}
			x := *d
			x.Conditions = slices.DeleteFunc(slices.Clone(d.Conditions), func(cd catalog.Condition) bool { return cd.Type == ConditionStuck })
			if res.stuck != nil {
				x.Conditions = append(x.Conditions, catalog.Condition{Type: ConditionStuck, Status: "True", Reason: res.stuck.reason, Message: res.stuck.message()})
			}
			waiting[d.UID] = &x
		}
		still := func(rs []*catalog.Resource) []*catalog.Resource {
			var left []*catalog.Resource
			for _, d := range rs {
				if gone[d.UID] {
					continue
				}
				if x, ok := waiting[d.UID]; ok {
					d = x
				}
				left = append(left, d)
			}
			return left
		}
		w.dependents = still(w.dependents)
		w.cascaders = still(w.cascaders)
	}

	// 4. The cascade finalizer goes once no blocking dependent is left:
	// by the purge itself when it is the last thing holding the resource
	// (one write instead of two), else on its own.
	purgeFinalizer := ""
	waitsForCascade := len(w.dependents) > 0 || len(w.cascaders) > 0
	if cascading && !waitsForCascade && r.Kind != BackupKind && len(r.Finalizers) == 1 && len(w.referrers) == 0 {
		purgeFinalizer = catalog.FinalizerCascade
	} else if cascading && !waitsForCascade {
		nr, err := c.st.RemoveFinalizer(c.actor(ctx), r.Key(), catalog.FinalizerCascade)
		if err != nil {
			return result{}, err
		}
		r = nr
	}

	// 5. Plugins, for a resource that is not a backup.
	if r.Kind != BackupKind && slices.Contains(r.Finalizers, catalog.FinalizerDeleteActions) {
		rs := []*catalog.Resource{r}
		if err := c.runPlugins(ctx, rs); err != nil {
			return result{}, err
		}
		r = rs[0]
	}
	w.pluginLeft = r.Kind != BackupKind && slices.Contains(r.Finalizers, catalog.FinalizerDeleteActions)

	// 6. Purge: no finalizer left, no block referrer alive.
	if r.Kind != BackupKind && (len(r.Finalizers) == 0 || purgeFinalizer != "") && len(w.referrers) == 0 {
		err := c.st.Purge(c.actor(ctx), r.Key(), catalog.PurgeOptions{Reason: purgeReason(r), Finalizer: purgeFinalizer})
		switch {
		case err == nil:
			// A read first: most resources never saved any progress.
			hadProgress := false
			if _, _, err := c.st.LoadProgress(ctx, r.UID); err == nil {
				hadProgress = true
				if err := c.st.DeleteProgress(ctx, r.UID); err != nil && !errors.Is(err, catalog.ErrNotFound) {
					c.log.Warn("removing plugin progress", "resource", r.Key(), "error", err)
				}
			}
			// Only a resource that had progress or was stuck can have
			// rows in the retry queue: they go with it (DeletionCompleted
			// when one had been a dead letter).
			if hadProgress || stuckCondition(r) != nil {
				if err := c.cfg.Retry.Finish(ctx, r.Key(), r.UID, false); err != nil {
					c.log.Warn("clearing the retry rows of a purged resource", "resource", r.Key(), "error", err)
				}
			}
			return result{done: true}, c.ownerGone(ctx, r.UID, rootOf(r), depth)
		case errors.Is(err, catalog.ErrNotFound):
			return result{done: true}, nil
		case errors.Is(err, catalog.ErrInvalidTransition):
			// Changed meanwhile; the next event brings it back.
		default:
			return result{}, err
		}
	}

	// 6b. A Backup that nothing holds any more is purged by its pipeline
	// (its tarball with it).
	if r.Kind == BackupKind && len(r.Finalizers) == 0 && len(w.referrers) == 0 {
		res, err := c.purgeBackup(ctx, r, depth)
		if err != nil || res.done || !res.next.IsZero() {
			return res, err
		}
	}

	// 7. Waiting: its rows in the retry queue, then is it stuck? A
	// Backup's items are the deletion pipeline's: when the pipeline says
	// the backup is stuck (its retry rows: RetriesExhausted, Discarded,
	// ItemsUnsettled...), the collector leaves the condition alone and
	// only passes its chain up. The collector writes (and clears) only a
	// condition of its own: the backup waiting on its cascade.
	if r.Kind == BackupKind {
		w.stuck = c.stuckOf(ctx, r, &w)
		if cur := stuckCondition(r); cur == nil || collectorReasons[cur.Reason] {
			if err := c.noteStuck(ctx, r, w.stuck); err != nil {
				return result{}, err
			}
		}
		return result{stuck: w.stuck}, nil
	}
	dead, err := c.syncRetryRows(ctx, r, &w)
	if err != nil {
		return result{}, err
	}
	w.stuck = c.stuckOf(ctx, r, &w)
	if len(dead) > 0 {
		reason, msg := retry.DeadLetterReason(r, dead)
		chain := []string{msg}
		if w.stuck != nil {
			chain = append(chain, w.stuck.chain...)
		}
		w.stuck = &stuckInfo{reason: reason, chain: chain}
	}
	if err := c.noteStuck(ctx, r, w.stuck); err != nil {
		return result{}, err
	}
	return result{stuck: w.stuck}, nil
}

// stillThere appends to waits what d is now: a resource the step waits
// for, whose move to Deleting the catalog refused because another step
// (another process, or lethe server's Parallel) moved it first. It is
// still waited for (dropping it once purged its owner while it lived);
// only a resource gone meanwhile is not.
func (c *Collector) stillThere(ctx context.Context, waits []*catalog.Resource, d *catalog.Resource) ([]*catalog.Resource, error) {
	cur, err := c.st.GetByUID(ctx, d.UID)
	if errors.Is(err, catalog.ErrNotFound) {
		return waits, nil
	}
	if err != nil {
		return waits, err
	}
	return append(waits, cur), nil
}

// ReasonReferrerStuck is the DeletionStuck reason of a resource that
// waits (Foreground) for a referrer holding a cascade reference to it,
// which is itself stuck; the chain continues with the referrer's.
const ReasonReferrerStuck = "CascadeReferrerStuck"

// Item ids of KindWait rows.
const (
	waitReference = "reference:"
	waitFinalizer = "finalizer:"
)

// syncRetryRows makes r's rows in the retry queue say what r waits on,
// and returns its dead letters. A live block referrer and a user
// finalizer are each a KindWait row: recorded when first seen, then one
// attempt each time the row is due (the queue's collector wakes r then;
// a change of the referrer or the finalizer wakes it sooner, from the
// change feed), discarded after the maximum attempts like any row. A
// wait that is gone loses its row. The unfinished plugin (a KindResource
// row, recorded by runPlugins) is named in w.plugin. The queue is read
// only for a resource that waits on one of those or was stuck: the
// plain wait for dependents costs nothing.
func (c *Collector) syncRetryRows(ctx context.Context, r *catalog.Resource, w *waits) ([]*catalog.RetryRow, error) {
	waitsOn := map[string]string{}
	for _, x := range w.referrers {
		if x.Phase != catalog.PhaseDeleting {
			waitsOn[waitReference+x.Key().String()] = r.Key().String() + " is blocked by " + x.Key().String() +
				", which holds a block reference to it and is " + string(x.Phase) + " (not being deleted)"
		}
	}
	for _, f := range r.Finalizers {
		if f != catalog.FinalizerCascade && f != catalog.FinalizerDeleteActions {
			waitsOn[waitFinalizer+f] = r.Key().String() + " waits for finalizer " + f + " (its controller removes it, or: lethe finalize " + finalizeArgs(r.Key(), f) + ")"
		}
	}
	if len(waitsOn) == 0 && !w.pluginLeft && stuckCondition(r) == nil {
		return nil, nil
	}
	rows, err := c.cfg.Retry.List(ctx, catalog.RetryFilter{OwnerUID: r.UID})
	if err != nil {
		return nil, err
	}
	now := c.now()
	var gone []catalog.RetryIdentity
	var outs []retry.Outcome
	var keep []*catalog.RetryRow
	have := map[string]bool{}
	for _, row := range rows {
		switch {
		case row.Kind == retry.KindWait:
			msg, ok := waitsOn[row.ItemID]
			if !ok {
				gone = append(gone, row.RetryIdentity)
				continue
			}
			have[row.ItemID] = true
			if rowDue(row, now) {
				outs = append(outs, retry.Outcome{Kind: retry.KindWait, Owner: r.Key(), UID: r.UID, ItemID: row.ItemID, Result: "waiting", Message: msg})
				continue
			}
		case row.Kind == retry.KindResource && !w.pluginLeft:
			gone = append(gone, row.RetryIdentity) // its plugins are all done
			continue
		case row.Kind == retry.KindResource && w.plugin == "":
			w.plugin = pluginWait(row)
		}
		keep = append(keep, row)
	}
	for _, id := range slices.Sorted(maps.Keys(waitsOn)) {
		if !have[id] {
			outs = append(outs, retry.Outcome{Kind: retry.KindWait, Owner: r.Key(), UID: r.UID, ItemID: id, Result: "waiting", Message: waitsOn[id]})
		}
	}
	if len(gone) > 0 {
		if err := c.cfg.Retry.Succeed(ctx, r.Key(), r.UID, gone); err != nil {
			return nil, err
		}
	}
	recorded, err := c.cfg.Retry.Record(ctx, outs...)
	if err != nil {
		return nil, err
	}
	var dead []*catalog.RetryRow
	for _, row := range append(keep, recorded...) {
		if row.State == catalog.RetryDiscarded {
			dead = append(dead, row)
		}
	}
	slices.SortFunc(dead, func(a, b *catalog.RetryRow) int { return cmp.Compare(a.ID, b.ID) })
	return dead, nil
}

// lastOutcome is the outcome of a row's last attempt (blocked, failed,
// error), past operator notes.
func lastOutcome(row *catalog.RetryRow) string {
	for i := len(row.History) - 1; i >= 0; i-- {
		if o := row.History[i].Outcome; o == "blocked" || o == "failed" || o == "error" || o == "waiting" {
			return o
		}
	}
	return "unfinished"
}

// pluginWait describes the retry row of an unfinished plugin.
func pluginWait(row *catalog.RetryRow) string {
	outcome := lastOutcome(row)
	when := "next attempt at " + row.NextAttemptAt.UTC().Format(time.RFC3339)
	switch row.State {
	case catalog.RetryDiscarded:
		when = "discarded: retries exhausted"
	case catalog.RetryRunning:
		when = "being retried now"
	}
	return fmt.Sprintf("plugin %s %s: %s (attempt %d, %s; lethe retry get %d)", row.Plugin, outcome, row.LastError, row.Attempts, when, row.ID)
}

// purgeBackup has the backup deletion pipeline purge r, which nothing
// holds any more.
func (c *Collector) purgeBackup(ctx context.Context, r *catalog.Resource, depth int) (result, error) {
	if c.cfg.PurgeBackup == nil {
		// The pipeline's work item stays queued: lethe server runs it
		// when it is due (deletion.WaitRecheck at the latest).
		_, err := c.st.Enqueue(ctx, catalog.WorkItem{Queue: BackupQueue, Key: r.UID, RunAt: c.now()})
		return result{}, err
	}
	err := c.cfg.PurgeBackup(ctx, r)
	if errors.Is(err, catalog.ErrLeaseHeld) {
		// Another process runs its deletion: look again shortly.
		return result{next: c.now().Add(c.cfg.PollInterval)}, nil
	}
	if err != nil {
		return result{}, err
	}
	if _, err := c.st.GetByUID(ctx, r.UID); errors.Is(err, catalog.ErrNotFound) {
		c.markDone(r.UID)
		return result{done: true}, c.ownerGone(ctx, r.UID, rootOf(r), depth)
	} else if err != nil {
		return result{}, err
	}
	return result{}, nil
}

// leaf says whether d may take the batch path: not a backup, no
// finalizer, no plugin selecting it. The catalog checks the rest (no
// dependent, no held reference, unchanged) in the same transaction.
func (c *Collector) leaf(d *catalog.Resource) bool {
	return d.Kind != BackupKind && len(d.Finalizers) == 0 && len(c.selecting(d)) == 0
}

// skipped says, in an audit reason, that a forced cascade skipped d's
// grace window.
func skipped(r, d *catalog.Resource) string {
	if forced(r) && skippedWindow(d) {
		return "; its grace window skipped (--force on the cascade's root)"
	}
	return ""
}

// skippedWindow says whether moving d to Deleting now skips a grace
// window it has.
func skippedWindow(d *catalog.Resource) bool {
	return graceOf(d) > 0 && d.Phase == catalog.PhaseActive || d.Phase == catalog.PhaseScheduled && d.DeletionDueAt != nil && d.DeletionDueAt.After(time.Now())
}

func purgeReason(r *catalog.Resource) string {
	return "garbage collected (" + string(r.PropagationPolicy) + "): every finalizer removed" + inCascadeOf(r)
}

// rootOf is the root of the cascade r's deletion belongs to: its
// DeletionRoot, or r itself (its own deletion was requested).
func rootOf(r *catalog.Resource) *catalog.ObjectRef {
	if r.DeletionRoot != nil {
		return r.DeletionRoot
	}
	ref := r.Ref()
	return &ref
}

// inCascadeOf names, in an audit reason, the root of the cascade r
// belongs to, when it is not r itself (whose name the reason says).
func inCascadeOf(r *catalog.Resource) string {
	if r.DeletionRoot == nil || r.DeletionRoot.UID == r.UID {
		return ""
	}
	return ", in the cascade of " + r.DeletionRoot.String()
}

func (c *Collector) actor(ctx context.Context) context.Context {
	return catalog.WithDefaultActor(ctx, "gc")
}

// ownerGone handles the dependents of a purged owner: each is deleted
// (Background) unless another owner remains, in which case it only loses
// the edge. Dependents already Deleting are left to their own items.
// root is the cascade the owner was purged in (nil: the owner's own).
func (c *Collector) ownerGone(ctx context.Context, uid string, root *catalog.ObjectRef, depth int) error {
	ctx, _ = inPass(ctx)
	deps, err := c.st.Dependents(ctx, uid)
	if err != nil || len(deps) == 0 {
		return err
	}
	gone := &catalog.Resource{UID: uid, Kind: "(purged owner)", Name: uid, DeletionRoot: root}
	var entered []*catalog.Resource
	for _, d := range deps {
		edge := ownerEdge(d, uid)
		if edge == nil || d.Phase == catalog.PhaseDeleting {
			continue
		}
		gone.Kind, gone.Name = edge.Kind, edge.Name
		gone.Namespace = d.Namespace
		remaining, err := c.remainingOwners(ctx, d, uid)
		if err != nil {
			return err
		}
		if len(remaining) > 0 {
			if err := c.unlink(ctx, d, gone, "owner "+edge.Kind+"/"+edge.Name+" purged; still owned by "+strings.Join(remaining, ", ")); err != nil {
				return err
			}
			continue
		}
		if c.inGrace(&catalog.Resource{}, d) {
			// Its own grace window first (its owner is gone: nothing
			// waits for it).
			if _, err := c.scheduleInCascade(ctx, gone, d, Background, "owner "+edge.Kind+"/"+edge.Name+" purged"+inCascadeOf(gone)); err != nil {
				return err
			}
			continue
		}
		nd, err := c.enterCascade(ctx, gone, d, Background, "owner "+edge.Kind+"/"+edge.Name+" purged"+inCascadeOf(gone))
		if errors.Is(err, catalog.ErrInvalidTransition) {
			continue
		}
		if err != nil {
			return err
		}
		entered = append(entered, nd)
	}
	if len(entered) == 0 {
		return nil
	}
	if depth < MaxInlineDepth {
		if err := c.runPlugins(ctx, entered); err != nil {
			return err
		}
	}
	for _, d := range entered {
		if depth < MaxInlineDepth {
			res, err := c.stepResource(ctx, d, depth+1)
			if err != nil {
				return err
			}
			if res.done {
				continue
			}
		}
		if err := c.queueLeft(ctx, d, time.Time{}); err != nil {
			return err
		}
	}
	return nil
}

// remainingOwners names d's owners other than exclude that still exist and
// are not being deleted.
func (c *Collector) remainingOwners(ctx context.Context, d *catalog.Resource, exclude string) ([]string, error) {
	var out []string
	for _, o := range d.Owners {
		if o.UID == exclude {
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
			out = append(out, or.Key().String())
		}
	}
	return out, nil
}

// unlink removes d's owner edge to owner, retrying on conflicts.
func (c *Collector) unlink(ctx context.Context, d *catalog.Resource, owner *catalog.Resource, why string) error {
	return c.rewrite(ctx, d, func(x *catalog.Resource) bool {
		n := len(x.Owners)
		x.Owners = slices.DeleteFunc(x.Owners, func(o catalog.OwnerRef) bool { return o.UID == owner.UID })
		return len(x.Owners) != n
	}, "unlink-owner", why)
}

// unset removes x's references to target, audited.
func (c *Collector) unset(ctx context.Context, x, target *catalog.Resource) error {
	return c.rewrite(ctx, x, func(y *catalog.Resource) bool {
		n := len(y.References)
		y.References = slices.DeleteFunc(y.References, func(ref catalog.Reference) bool {
			return ref.OnTargetDelete == catalog.RefUnset && len(refsTo(&catalog.Resource{References: []catalog.Reference{ref}}, target)) == 1
		})
		return len(y.References) != n
	}, "unset-reference", "reference to "+target.Key().String()+" unset: its target is being deleted")
}

// rewrite applies change to the live resource and updates it, reloading
// on a conflict; then it appends an audit entry.
func (c *Collector) rewrite(ctx context.Context, x *catalog.Resource, change func(*catalog.Resource) bool, action, why string) error {
	cur := x
	for attempt := 0; ; attempt++ {
		if !change(cur) {
			return nil
		}
		_, err := c.st.Update(c.actor(ctx), cur)
		if err == nil {
			break
		}
		if !errors.Is(err, catalog.ErrConflict) || attempt >= 5 {
			return err
		}
		if cur, err = c.st.GetByUID(ctx, x.UID); err != nil {
			if errors.Is(err, catalog.ErrNotFound) {
				return nil
			}
			return err
		}
	}
	return c.st.AppendAudit(ctx, catalog.AuditEntry{
		Time: c.now(), Actor: catalog.ActorFrom(c.actor(ctx)), Action: action, Kind: x.Kind, Namespace: x.Namespace,
		Name: x.Name, UID: x.UID, FromPhase: x.Phase, ToPhase: x.Phase, Reason: why,
	})
}

// stuckOf says whether r waits on something not itself being deleted:
// a live block referrer, a user finalizer, an unfinished plugin action, a
// stuck dependent or referrer, or an owner cycle.
func (c *Collector) stuckOf(ctx context.Context, r *catalog.Resource, w *waits) *stuckInfo {
	self := r.Key().String()
	if len(w.dependents) > 0 || len(w.referrers) > 0 || len(w.cascaders) > 0 {
		// A cycle first: its members would otherwise report each other
		// (DependentStuck within BlockedByReferrer within ...).
		cyc, err := c.cycleThrough(ctx, r)
		if err != nil {
			c.log.Warn("looking for a cycle", "resource", r.Key(), "error", err)
		}
		if cyc != nil {
			return &stuckInfo{reason: ReasonCycle, cycle: catalog.Canonical(cyc),
				chain: []string{catalog.FormatCycle(cyc) + ": none of them can be purged before the others"}}
		}
	}
	for _, x := range w.referrers {
		if x.Phase != catalog.PhaseDeleting {
			return &stuckInfo{reason: "BlockedByReferrer", chain: []string{
				self + " is blocked by " + x.Key().String() + ", which holds a block reference to it and is " + string(x.Phase) + " (not being deleted)"}}
		}
		if s := stuckCondition(x); s != nil {
			return &stuckInfo{reason: "BlockedByReferrer", chain: append([]string{self + " is blocked by " + x.Key().String() + " (block reference)"}, s.Message)}
		}
	}
	if s := c.heldByPeer(ctx, self, append(slices.Clone(w.dependents), w.cascaders...)); s != nil {
		return s
	}
	for _, d := range append(slices.Clone(w.dependents), w.cascaders...) {
		if d.Phase == catalog.PhaseScheduled && d.DeletionDueAt != nil {
			return &stuckInfo{reason: ReasonGraceWindow, chain: []string{self + " waits for " + d.Key().String() +
				", Scheduled in its own grace window until " + d.DeletionDueAt.UTC().Format(time.RFC3339) +
				" (lethe undelete keeps it; delete " + self + " again with --force to skip the windows)"}}
		}
	}
	for _, d := range w.dependents {
		if s := stuckCondition(d); s != nil {
			return &stuckInfo{reason: "DependentStuck", chain: append([]string{self + " waits for its dependent " + d.Key().String()}, s.Message)}
		}
	}
	for _, x := range w.cascaders {
		if s := stuckCondition(x); s != nil {
			return &stuckInfo{reason: ReasonReferrerStuck, chain: append([]string{self + " waits for " + x.Key().String() + ", which holds a cascade reference to it"}, s.Message)}
		}
	}
	if w.plugin != "" {
		return &stuckInfo{reason: "PluginUnfinished", chain: []string{self + " waits for " + w.plugin}}
	}
	for _, f := range r.Finalizers {
		if f != catalog.FinalizerCascade && f != catalog.FinalizerDeleteActions {
			return &stuckInfo{reason: "WaitingForFinalizer", chain: []string{
				self + " waits for finalizer " + f + " (its controller removes it, or: lethe finalize " + finalizeArgs(r.Key(), f) + ")"}}
		}
	}
	return nil
}

func finalizeArgs(k catalog.Key, f string) string {
	s := k.Kind + " " + k.Name
	if k.Namespace != "" {
		s += " -n " + k.Namespace
	}
	return s + " " + f
}

// collectorReasons are the reasons of the DeletionStuck conditions the
// collector writes from the graph (stuckOf).
var collectorReasons = map[string]bool{
	"BlockedByReferrer": true, "DependentStuck": true, "PluginUnfinished": true,
	"WaitingForFinalizer": true, "OwnerCycle": true, ReasonCycle: true, ReasonReferrerStuck: true, ReasonGraceWindow: true,
	ReasonHeldByPeer: true,
}

// ReasonHeldByPeer is the reason of a resource waiting for a dependent or
// cascade referrer that a peer holds a back-reference to. Deletion across
// peers is not implemented yet, so the catalog refuses to delete it, and
// the wait would never end by itself.
const ReasonHeldByPeer = "HeldByPeer"

// heldByPeer is the stuckInfo of self waiting for one of ds (not yet
// Deleting) that a peer references; nil when none is.
func (c *Collector) heldByPeer(ctx context.Context, self string, ds []*catalog.Resource) *stuckInfo {
	for _, d := range ds {
		if d.Phase == catalog.PhaseDeleting {
			continue
		}
		bs, err := c.st.BackReferences(ctx, d.Key())
		if err != nil {
			c.log.Warn("reading back-references from peers", "resource", d.Key(), "error", err)
			continue
		}
		if len(bs) > 0 {
			b := bs[0]
			return &stuckInfo{reason: ReasonHeldByPeer, chain: []string{fmt.Sprintf(
				"%s waits for %s, which %d resource(s) on other peers reference (first: %s on peer %s, %s); deletion across peers is not implemented yet",
				self, d.Key(), len(bs), b.Referrer.Key(), b.Peer, b.OnTargetDelete)}}
		}
	}
	return nil
}

func stuckCondition(r *catalog.Resource) *catalog.Condition {
	for i := range r.Conditions {
		if r.Conditions[i].Type == ConditionStuck && r.Conditions[i].Status == "True" {
			return &r.Conditions[i]
		}
	}
	return nil
}

// noteStuck sets, or clears, r's DeletionStuck condition; it writes only
// when the condition changes.
func (c *Collector) noteStuck(ctx context.Context, r *catalog.Resource, s *stuckInfo) error {
	cur := stuckCondition(r)
	switch {
	case s == nil && cur == nil:
		return nil
	case s != nil && cur != nil && cur.Reason == s.reason && cur.Message == s.message():
		return nil
	}
	err := c.rewriteQuiet(ctx, r, func(x *catalog.Resource) bool {
		x.Conditions = slices.DeleteFunc(x.Conditions, func(cd catalog.Condition) bool { return cd.Type == ConditionStuck })
		if s != nil {
			x.Conditions = append(x.Conditions, catalog.Condition{Type: ConditionStuck, Status: "True", Reason: s.reason,
				Message: s.message(), LastTransitionTime: c.now()})
		}
		return true
	})
	if err != nil {
		return err
	}
	if s != nil && s.reason == ReasonCycle && s.cycle[0].From == r.Key() {
		// One audit entry per cycle: by its first resource (every
		// resource of it reports the same cycle), when it is found.
		if err := c.st.AppendAudit(ctx, catalog.AuditEntry{
			Time: c.now(), Actor: catalog.ActorFrom(c.actor(ctx)), Action: AuditCycle, Kind: r.Kind, Namespace: r.Namespace,
			Name: r.Name, UID: r.UID, FromPhase: r.Phase, ToPhase: r.Phase, Reason: s.message(),
		}); err != nil {
			return err
		}
	}
	return nil
}

// rewriteQuiet is rewrite without an audit entry (conditions).
func (c *Collector) rewriteQuiet(ctx context.Context, x *catalog.Resource, change func(*catalog.Resource) bool) error {
	cur := x
	for attempt := 0; ; attempt++ {
		change(cur)
		_, err := c.st.Update(c.actor(ctx), cur)
		if err == nil || errors.Is(err, catalog.ErrNotFound) {
			return nil
		}
		if !errors.Is(err, catalog.ErrConflict) || attempt >= 5 {
			return err
		}
		if cur, err = c.st.GetByUID(ctx, x.UID); err != nil {
			if errors.Is(err, catalog.ErrNotFound) {
				return nil
			}
			return err
		}
	}
}

var _ = json.Marshal
