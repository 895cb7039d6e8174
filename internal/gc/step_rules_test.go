package gc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// The rules of one collector step (step.go) that the mutation sweep found
// unpinned: which dependents an owner waits for when the catalog's batch
// refuses them, or when another step moved them to Deleting first, and a
// step that loses such a race going on with the rest of its work.

// stepOnce moves r to Deleting with prop (gc.Collector.Delete, which only
// queues it) and runs one claimed step of it with c.
func stepOnce(t *testing.T, f *fixture, c *gc.Collector, r *catalog.Resource, prop gc.Propagation) {
	t.Helper()
	_, err := c.Delete(f.ctx, r.Key(), gc.DeleteOptions{Propagation: prop})
	require.NoError(t, err)
	w, err := f.st.ClaimKey(f.ctx, gc.Queue, r.UID, "test", 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.StepClaimed(f.ctx, w))
}

// TestOnlyABlockingDependentHoldsAForegroundOwnerWhenTheBatchRefusesIt:
// a dependent with no finalizer takes the batch path; when the catalog
// refuses it there (a live block referrer holds it), the step moves it to
// Deleting on its own, and the owner waits for it only if the owner is
// Foreground and the edge has blockOwnerDeletion (DESIGN §6). A
// Background owner, or a Foreground one whose edge does not block, is
// purged while the dependent waits for its referrer.
func TestOnlyABlockingDependentHoldsAForegroundOwnerWhenTheBatchRefusesIt(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		for _, tc := range []struct {
			name  string
			prop  gc.Propagation
			block bool
			waits bool
		}{
			{"background-blocking", gc.Background, true, false},
			{"foreground-nonblocking", gc.Foreground, false, false},
			{"foreground-blocking", gc.Foreground, true, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				o := f.res("App", "o-"+tc.name)
				d := f.res("Volume", "d-"+tc.name, ownedBy(o, tc.block))
				f.res("Restore", "user-"+tc.name, refTo(d, catalog.RefBlock))
				stepOnce(t, f, f.c, o, tc.prop)
				xd := f.requirePhase(d, catalog.PhaseDeleting)
				require.Equal(t, "BlockedByReferrer", stuck(xd).Reason)
				if !tc.waits {
					f.requirePurged(o)
					return
				}
				xo := f.requirePhase(o, catalog.PhaseDeleting)
				require.Contains(t, xo.Finalizers, catalog.FinalizerCascade)
			})
		}
	})
}

// TestOnlyABlockingDependentHoldsAForegroundOwnerWhenAnotherStepMovedItFirst:
// the same rule when the batch refused the dependent (a dependent of its
// own holds it) and another step moved it to Deleting before this one
// could (the catalog refuses this step's move): a Background owner, or a
// Foreground one whose edge does not block, does not wait for it.
func TestOnlyABlockingDependentHoldsAForegroundOwnerWhenAnotherStepMovedItFirst(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		for _, tc := range []struct {
			name  string
			prop  gc.Propagation
			block bool
			waits bool
		}{
			{"background-blocking", gc.Background, true, false},
			{"foreground-nonblocking", gc.Foreground, false, false},
			{"foreground-blocking", gc.Foreground, true, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				o := f.res("App", "o-"+tc.name)
				d := f.res("Volume", "d-"+tc.name, ownedBy(o, tc.block))
				f.res("Snapshot", "below-"+tc.name, ownedBy(d, true), finalizer("example.com/hold"))
				es := &enterFirst{Store: st, key: d.Key()}
				c, err := gc.New(gc.Config{Store: es, NoPlugins: true, Parallel: 1, PollInterval: 50 * time.Millisecond, Recheck: time.Hour, LeaseTTL: 5 * time.Second})
				require.NoError(t, err)
				stepOnce(t, f, c, o, tc.prop)
				require.True(t, es.won, "the other collector moved %s first", d.Key())
				f.requirePhase(d, catalog.PhaseDeleting)
				if !tc.waits {
					f.requirePurged(o)
					return
				}
				f.requirePhase(o, catalog.PhaseDeleting)
			})
		}
	})
}

// TestAStepThatLosesTheRaceForADependentStillHandlesTheOwnersReferrers:
// when another step moved a blocking dependent to Deleting first, the
// owner's step still waits for it and goes on with the rest of its
// work in the same step: its cascade referrer is deleted (and, holding
// nothing, purged) at once.
func TestAStepThatLosesTheRaceForADependentStillHandlesTheOwnersReferrers(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("Account", "o")
		d := f.res("Project", "d", ownedBy(o, true), finalizer("example.com/hold"))
		x := f.res("Project", "x", refTo(o, catalog.RefCascade))
		es := &enterFirst{Store: st, key: d.Key()}
		c, err := gc.New(gc.Config{Store: es, NoPlugins: true, Parallel: 1, PollInterval: 50 * time.Millisecond, Recheck: time.Hour, LeaseTTL: 5 * time.Second})
		require.NoError(t, err)
		stepOnce(t, f, c, o, gc.Foreground)
		require.True(t, es.won, "the other collector moved %s first", d.Key())
		f.requirePhase(d, catalog.PhaseDeleting)
		f.requirePhase(o, catalog.PhaseDeleting)
		f.requirePurged(x)
	})
}

// TestAForegroundTargetWaitsForACascadeReferrerInItsGraceWindow: a
// cascade referrer with its own deletion delay is Scheduled by the
// cascade (DESIGN §6); a Foreground target stays Deleting until it is
// purged, saying it waits for the window, while a Background target is
// purged at once and leaves the referrer in its window.
func TestAForegroundTargetWaitsForACascadeReferrerInItsGraceWindow(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		for _, prop := range []gc.Propagation{gc.Foreground, gc.Background} {
			t.Run(string(prop), func(t *testing.T) {
				a := f.res("Account", "a-"+string(prop))
				x := f.res("Report", "x-"+string(prop), refTo(a, catalog.RefCascade), delay("2h"))
				stepOnce(t, f, f.c, a, prop)
				f.requirePhase(x, catalog.PhaseScheduled)
				if prop == gc.Background {
					f.requirePurged(a)
					return
				}
				xa := f.requirePhase(a, catalog.PhaseDeleting)
				require.Contains(t, xa.Finalizers, catalog.FinalizerCascade)
				require.Equal(t, gc.ReasonGraceWindow, stuck(xa).Reason)
			})
		}
	})
}

// TestAStepThatLosesTheRaceForACascadeReferrerStillStepsWhatItMovedToDeleting:
// when another step moved a cascade referrer to Deleting first, the
// target's step still waits for it and goes on in the same step: the
// dependent it moved to Deleting is stepped at once (a user finalizer
// holds it: DeletionStuck says so) and the target's own DeletionStuck
// names that dependent.
func TestAStepThatLosesTheRaceForACascadeReferrerStillStepsWhatItMovedToDeleting(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("Account", "o")
		d := f.res("Project", "d", ownedBy(o, true), finalizer("example.com/hold"))
		x := f.res("Report", "x", refTo(o, catalog.RefCascade), finalizer("example.com/hold"))
		es := &enterFirst{Store: st, key: x.Key()}
		c, err := gc.New(gc.Config{Store: es, NoPlugins: true, Parallel: 1, PollInterval: 50 * time.Millisecond, Recheck: time.Hour, LeaseTTL: 5 * time.Second})
		require.NoError(t, err)
		stepOnce(t, f, c, o, gc.Foreground)
		require.True(t, es.won, "the other collector moved %s first", x.Key())
		f.requirePhase(x, catalog.PhaseDeleting)
		xd := f.requirePhase(d, catalog.PhaseDeleting)
		require.NotNil(t, stuck(xd), "the dependent was stepped in the same step")
		require.Equal(t, "WaitingForFinalizer", stuck(xd).Reason)
		xo := f.requirePhase(o, catalog.PhaseDeleting)
		require.NotNil(t, stuck(xo))
		require.Equal(t, "DependentStuck", stuck(xo).Reason)
	})
}

// TestOneStepCarriesACascadeThroughItsCascadeReferrers: the step that
// moves a target's cascade referrer to Deleting steps it at once, in
// process, and a referrer that nothing holds is purged in that step;
// the Foreground target, with nothing left to wait for, is purged in
// the same step (DESIGN §6: the collector carries a cascade as far as
// it can go now, without waiting for its own queue), and leaves no work
// item behind for what it finished.
func TestOneStepCarriesACascadeThroughItsCascadeReferrers(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		a := f.res("Account", "a")
		x := f.res("Project", "x", refTo(a, catalog.RefCascade))
		y := f.res("Project", "y", refTo(a, catalog.RefCascade))
		stepOnce(t, f, f.c, a, gc.Foreground)
		f.requirePurged(x, y, a)
		// A resource the cascade moved to Deleting is queued only when its
		// inline step leaves it waiting: none is left in the queue.
		items, err := f.st.Claim(f.ctx, gc.Queue, "probe", time.Minute, 100)
		require.NoError(t, err)
		require.Empty(t, items, "no work item is left for a cascade one step finished")
	})
}

// TestACascadeDeeperThanOneStepFollowsIsQueuedWhereTheStepStops: one step
// follows a cascade in process down to gc.MaxInlineDepth; what it moves
// to Deleting below that is queued, due at once, so that the collector
// carries on from there (nothing Deleting is left without a work item),
// and nothing above it is due again before its recheck.
func TestACascadeDeeperThanOneStepFollowsIsQueuedWhereTheStepStops(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		n := gc.MaxInlineDepth + 3
		chain := []*catalog.Resource{f.res("Node", "n00")}
		for i := 1; i < n; i++ {
			chain = append(chain, f.res("Node", fmt.Sprintf("n%02d", i), ownedBy(chain[i-1], true)))
		}
		stepOnce(t, f, f.c, chain[0], gc.Foreground)
		for i, r := range chain {
			if i <= gc.MaxInlineDepth+1 {
				f.requirePhase(r, catalog.PhaseDeleting)
			} else {
				f.requirePhase(r, catalog.PhaseActive)
			}
		}
		items, err := f.st.Claim(f.ctx, gc.Queue, "probe", time.Minute, 100)
		require.NoError(t, err)
		var due []string
		for _, it := range items {
			due = append(due, it.Key)
		}
		require.Equal(t, []string{chain[gc.MaxInlineDepth+1].UID}, due,
			"the resource the step moved to Deleting past its depth is queued, due now; the ones it stepped wait for their recheck")
	})
}

// TestTheCascadeFinalizerGoesWhenOnlyABlockReferrerHolds: the cascade
// finalizer goes once nothing of the cascade is left to wait for (DESIGN
// §6), also when a live block referrer still holds the resource: it goes
// on its own, and only the referrer is left to wait for.
func TestTheCascadeFinalizerGoesWhenOnlyABlockReferrerHolds(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		held := f.res("Account", "held")
		f.res("Restore", "user", refTo(held, catalog.RefBlock))
		_, err := f.st.Delete(f.ctx, held.Key(), catalog.DeleteOptions{Propagation: catalog.PropagationForeground, Finalizers: []string{catalog.FinalizerCascade}})
		require.NoError(t, err)
		_, err = f.st.Enqueue(f.ctx, catalog.WorkItem{Queue: gc.Queue, Key: held.UID, RunAt: time.Now()})
		require.NoError(t, err)
		w, err := f.st.ClaimKey(f.ctx, gc.Queue, held.UID, "test", 5*time.Second)
		require.NoError(t, err)
		require.NoError(t, f.c.StepClaimed(f.ctx, w))
		xh := f.requirePhase(held, catalog.PhaseDeleting)
		require.NotContains(t, xh.Finalizers, catalog.FinalizerCascade, "only the block referrer holds it")
		require.Equal(t, "BlockedByReferrer", stuck(xh).Reason)
	})
}

// TestOnlyABackupIsHandedToTheBackupPipeline: a step hands a resource to
// the backup deletion pipeline's queue only when it is a Backup that
// nothing holds any more; a resource of another kind that waits (here for
// a user finalizer) gets no item there.
func TestOnlyABackupIsHandedToTheBackupPipeline(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		w := f.res("Widget", "w", finalizer("example.com/hold"))
		stepOnce(t, f, f.c, w, gc.Foreground)
		require.Equal(t, "WaitingForFinalizer", stuck(f.requirePhase(w, catalog.PhaseDeleting)).Reason)
		items, err := f.st.Claim(f.ctx, gc.BackupQueue, "probe", time.Minute, 100)
		require.NoError(t, err)
		require.Empty(t, items, "no backup deletion is queued for a Widget")
	})
}
