package gc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// planOf returns the dry run's entries by resource name: action and
// reason, each listed once (a resource listed twice fails the test).
func planOf(t *testing.T, f *fixture, r *catalog.Resource, opts gc.DeleteOptions) map[string]gc.PlanEntry {
	t.Helper()
	opts.DryRun = true
	p, err := f.c.Delete(f.ctx, r.Key(), opts)
	require.NoError(t, err)
	out := map[string]gc.PlanEntry{}
	for _, e := range p.Entries {
		_, dup := out[e.Resource.Name]
		require.False(t, dup, "%s listed twice: %+v", e.Resource.Name, p.Entries)
		out[e.Resource.Name] = e
	}
	return out
}

func actions(plan map[string]gc.PlanEntry) map[string]string {
	out := map[string]string{}
	for n, e := range plan {
		out[n] = e.Action
	}
	return out
}

// TestPlanDeletesADependentWhoseOtherOwnersAreAllGoingAndUnlinksTheRest:
// the dry run applies the several-owners rule as the collector does: a
// dependent is deleted when each of its other owners is in the same
// cascade or already Deleting, and only unlinked while one of them
// remains (Active); one reached by two owners of the cascade is listed once.
func TestPlanDeletesADependentWhoseOtherOwnersAreAllGoingAndUnlinksTheRest(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		a := f.res("Set", "a", ownedBy(o, true))
		b := f.res("Set", "b", ownedBy(o, true))
		other := f.res("App", "other")
		dying := f.res("App", "dying", finalizer("example.com/hold"))
		_, err := f.c.Delete(f.ctx, dying.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		f.requirePhase(dying, catalog.PhaseDeleting)
		third := f.res("App", "third")
		f.res("Pod", "kept", ownedBy(o, false), ownedBy(other, false), ownedBy(third, false))
		f.res("Pod", "ownersgoing", ownedBy(o, false), ownedBy(dying, false))
		f.res("Pod", "both", ownedBy(a, false), ownedBy(b, false))
		f.res("Pod", "alone", ownedBy(o, false))

		p := planOf(t, f, o, gc.DeleteOptions{})
		require.Equal(t, map[string]string{
			"o": gc.ActionDelete, "a": gc.ActionDelete, "b": gc.ActionDelete,
			"kept": gc.ActionUnlink, "ownersgoing": gc.ActionDelete,
			"both": gc.ActionDelete, "alone": gc.ActionDelete,
		}, actions(p))
		require.Equal(t, "loses its owner App/prod/o; still owned by App/prod/other, App/prod/third", p["kept"].Reason)
	})
}

// TestPlanPropagatesForegroundDownAForegroundCascadeAndBackgroundBelowBackground:
// each entry says the propagation it is deleted with: Foreground's
// dependents are deleted in the foreground, at every depth; Background's
// in the background; Orphan's dependents are orphaned, not deleted.
func TestPlanPropagatesForegroundDownAForegroundCascadeAndBackgroundBelowBackground(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d := f.res("Set", "d", ownedBy(o, true))
		f.res("Pod", "g", ownedBy(d, true))

		fg := planOf(t, f, o, gc.DeleteOptions{Propagation: gc.Foreground})
		require.Equal(t, "dependent of Set/prod/d (Foreground)", fg["g"].Reason)
		require.Equal(t, "dependent of App/prod/o (Foreground)", fg["d"].Reason)

		bg := planOf(t, f, o, gc.DeleteOptions{Propagation: gc.Background})
		require.Equal(t, "requested (Background)", bg["o"].Reason)
		require.Equal(t, "dependent of App/prod/o (Background)", bg["d"].Reason)
		require.Equal(t, "dependent of Set/prod/d (Background)", bg["g"].Reason)

		or := planOf(t, f, o, gc.DeleteOptions{Propagation: gc.Orphan})
		require.Equal(t, map[string]string{"o": gc.ActionDelete, "d": gc.ActionOrphan}, actions(or))
	})
}

// TestPlanDeletesACascadeReferrerWithItsOwnPropagationPolicy: a referrer
// reached by a cascade reference is deleted with the propagation policy
// its own deletion was asked with (here Orphan, while it waited out its
// grace window, skipped by --force), Foreground when it has none, never
// the target's.
func TestPlanDeletesACascadeReferrerWithItsOwnPropagationPolicy(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		a := f.res("Account", "a")
		x := f.res("Project", "x", refTo(a, catalog.RefCascade), delay("1h"))
		f.res("Pod", "xd", ownedBy(x, true))
		_, err := f.c.Delete(f.ctx, x.Key(), gc.DeleteOptions{Propagation: gc.Orphan})
		require.NoError(t, err)
		f.requirePhase(x, catalog.PhaseScheduled)
		y := f.res("Project", "y", refTo(a, catalog.RefCascade))
		f.res("Pod", "yd", ownedBy(y, true))

		p := planOf(t, f, a, gc.DeleteOptions{Propagation: gc.Background, Force: true})
		require.Equal(t, map[string]string{
			"a": gc.ActionDelete, "x": gc.ActionDelete, "xd": gc.ActionOrphan,
			"y": gc.ActionDelete, "yd": gc.ActionDelete,
		}, actions(p))
		require.Equal(t, "cascade reference to Account/prod/a (Orphan); its grace window skipped (--force)", p["x"].Reason)
		require.Equal(t, "cascade reference to Account/prod/a (Foreground)", p["y"].Reason)
		require.Equal(t, "dependent of Project/prod/y (Foreground)", p["yd"].Reason)
	})
}

// TestPlanOfARootWithAGraceWindowShowsItsWholeCascade: a dry run on a
// resource that carries its own deletion delay still lists what its
// cascade will do once the window ends (its dependents' windows kept),
// not just the root.
func TestPlanOfARootWithAGraceWindowShowsItsWholeCascade(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o", delay("1h"))
		f.res("Pod", "d", ownedBy(o, true))
		f.res("Pod", "w", ownedBy(o, true), delay("1h"))
		require.Equal(t, map[string]string{"o": gc.ActionDelete, "d": gc.ActionDelete, "w": gc.ActionSchedule},
			actions(planOf(t, f, o, gc.DeleteOptions{})))
	})
}

// TestPlanSaysWhichGraceWindowsForceSkips: with --force the dry run
// deletes what carries a delay, saying its window is skipped, and says
// nothing of the kind for what carries none.
func TestPlanSaysWhichGraceWindowsForceSkips(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o", delay("1h"))
		f.res("Pod", "d", ownedBy(o, true))
		f.res("Pod", "w", ownedBy(o, true), delay("1h"))
		p := planOf(t, f, o, gc.DeleteOptions{Force: true})
		require.Equal(t, map[string]string{"o": gc.ActionDelete, "d": gc.ActionDelete, "w": gc.ActionDelete}, actions(p))
		require.Equal(t, "dependent of App/prod/o (Foreground); its grace window skipped (--force)", p["w"].Reason)
		require.Equal(t, "dependent of App/prod/o (Foreground)", p["d"].Reason)
		require.Equal(t, "requested (Foreground)", p["o"].Reason)
	})
}

// TestPlanListsABlockReferrerOutsideTheCascadeAsBlockedAndOneInsideAsDeleted:
// a block referrer the cascade does not delete holds its target (blocked);
// one the cascade deletes too is only deleted (the target waits for it).
func TestPlanListsABlockReferrerOutsideTheCascadeAsBlockedAndOneInsideAsDeleted(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d := f.res("Volume", "d", ownedBy(o, true))
		f.res("Pod", "inside", ownedBy(o, true), refTo(d, catalog.RefBlock))
		// A block reference to the root would refuse the delete at once:
		// the outside referrer holds one to a dependent.
		f.res("Restore", "outside", refTo(d, catalog.RefBlock))
		f.res("Report", "u", refTo(d, catalog.RefUnset))
		f.res("Report", "k", refTo(d, catalog.RefAllowDangling))
		p := planOf(t, f, o, gc.DeleteOptions{})
		require.Equal(t, map[string]string{
			"o": gc.ActionDelete, "d": gc.ActionDelete, "inside": gc.ActionDelete,
			"outside": gc.ActionBlocked, "u": gc.ActionUnset, "k": gc.ActionDangling,
		}, actions(p))
		require.Equal(t, "holds a block reference to Volume/prod/d, which waits until it is gone", p["outside"].Reason)
	})
}

// TestPlanListsEachCycleOnceHoweverOftenTheCascadeReachesIt: a cycle the
// cascade reaches through two of its resources is one blocked entry.
func TestPlanListsEachCycleOnceHoweverOftenTheCascadeReachesIt(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		x := f.res("Node", "x")
		w := f.res("Node", "w", ownedBy(x, false))
		y := f.res("Node", "y", ownedBy(x, true), ownedBy(w, false))
		x = f.get(x)
		ownedBy(y, true)(x)
		f.storeAnyway(x)
		p, err := f.c.Delete(f.ctx, x.Key(), gc.DeleteOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 1, p.Count(gc.ActionBlocked), "%+v", p.Entries)
		require.Equal(t, "cycle: Node/prod/x owns Node/prod/y; Node/prod/y owns Node/prod/x: none of them can be purged before the others",
			p.Entries[len(p.Entries)-1].Reason)
	})
}

// TestPlanEntryOfACycleShowsItsFirstResourcesPhase: the blocked entry of
// a cycle names the cycle's first resource with that resource's phase,
// not the phase of the one the cascade reached it by.
func TestPlanEntryOfACycleShowsItsFirstResourcesPhase(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		x := f.res("Node", "x", finalizer("example.com/hold"))
		w := f.res("Node", "w", ownedBy(x, false))
		y := f.res("Node", "y", ownedBy(x, true), ownedBy(w, false))
		x = f.get(x)
		ownedBy(y, true)(x)
		f.storeAnyway(x)
		_, err := f.c.Delete(f.ctx, x.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		f.requirePhase(x, catalog.PhaseDeleting)
		f.requirePhase(y, catalog.PhaseActive)
		p, err := f.c.Delete(f.ctx, x.Key(), gc.DeleteOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 1, p.Count(gc.ActionBlocked), "%+v", p.Entries)
		e := p.Entries[len(p.Entries)-1]
		require.Equal(t, x.Key(), e.Resource)
		require.Equal(t, catalog.PhaseDeleting, e.Phase)
	})
}
