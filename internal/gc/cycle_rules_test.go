package gc_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// pinnedRefTo is refTo naming the target's UID too, as lethe apply
// writes a reference to a target it knows.
func pinnedRefTo(t *catalog.Resource, uid string, policy catalog.OnTargetDelete) func(*catalog.Resource) {
	return func(r *catalog.Resource) {
		r.References = append(r.References, catalog.Reference{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name, UID: uid, OnTargetDelete: policy})
	}
}

// TestACycleThroughReferencesPinnedToTheirTargetsIsACycleAndAStalePinIsNot:
// a block reference that names its target's UID is an edge of a cycle
// like one that names none; one that names an earlier UID (the key now
// holds another resource) is no edge: the refusal of a delete names the
// referrer, and a cycle only when the pins are the targets'.
func TestACycleThroughReferencesPinnedToTheirTargetsIsACycleAndAStalePinIsNot(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		r1 := f.res("R", "r1")
		r2 := f.res("R", "r2", pinnedRefTo(r1, r1.UID, catalog.RefBlock))
		r1 = f.get(r1)
		pinnedRefTo(r2, r2.UID, catalog.RefBlock)(r1)
		f.storeAnyway(r1)
		_, err := f.c.Delete(f.ctx, r1.Key(), gc.DeleteOptions{})
		var re *gc.RefusedError
		require.ErrorAs(t, err, &re)
		require.Contains(t, err.Error(), "cycle: R/prod/r2 holds a block reference to R/prod/r1; R/prod/r1 holds a block reference to R/prod/r2")

		r3 := f.res("R", "r3")
		r4 := f.res("R", "r4", pinnedRefTo(r3, r3.UID, catalog.RefBlock))
		r3 = f.get(r3)
		pinnedRefTo(r4, "an-earlier-r4", catalog.RefBlock)(r3)
		f.storeAnyway(r3)
		_, err = f.c.Delete(f.ctx, r3.Key(), gc.DeleteOptions{})
		require.ErrorAs(t, err, &re)
		require.Contains(t, err.Error(), "R/prod/r4")
		require.Nil(t, re.Cycle, "%v", err)
		require.NotContains(t, err.Error(), "cycle")
	})
}

// TestACascadeDeletesAScheduledDependentWhoseWindowHasEnded: a dependent
// that is Scheduled keeps its grace window from a cascade only until the
// window ends; past it (its timer not fired yet), the cascade deletes it.
func TestACascadeDeletesAScheduledDependentWhoseWindowHasEnded(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d := f.res("Pod", "d", ownedBy(o, true), delay("1h"))
		w := f.res("Pod", "w", ownedBy(o, true), delay("3h"))
		for _, r := range []*catalog.Resource{d, w} {
			_, err := f.c.Delete(f.ctx, r.Key(), gc.DeleteOptions{})
			require.NoError(t, err)
			f.requirePhase(r, catalog.PhaseScheduled)
		}
		f.res("Pod", "a", ownedBy(o, true), delay("1h"))
		f.skew.Store(int64(2 * time.Hour))
		p := planOf(t, f, o, gc.DeleteOptions{})
		require.Equal(t, map[string]string{"o": gc.ActionDelete, "d": gc.ActionDelete, "w": gc.ActionSchedule, "a": gc.ActionSchedule}, actions(p))
		// The dry run says how long each window lasts: until its end, or
		// the delay it will be Scheduled for.
		xw := f.get(w)
		require.Equal(t, "dependent of App/prod/o (Foreground); Scheduled first for its own grace window, until "+xw.DeletionDueAt.UTC().Format(time.RFC3339), p["w"].Reason)
		require.Equal(t, "dependent of App/prod/o (Foreground); Scheduled first for its own grace window (lethe.io/deletion-delay=1h)", p["a"].Reason)
		require.Equal(t, "dependent of App/prod/o (Foreground)", p["d"].Reason, "no window is skipped without --force")
		require.Equal(t, "requested (Foreground)", p["o"].Reason)
	})
}

// TestACycleThroughACascadeReferenceIsACycle: a cascade reference is an
// edge of a cycle of waits like an owner edge (its target waits, under
// Foreground, for the referrer's purge): the dry run lists the cycle as
// blocked, naming the reference.
func TestACycleThroughACascadeReferenceIsACycle(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		x := f.res("Node", "x")
		y := f.res("Node", "y", ownedBy(x, true))
		x = f.get(x)
		refTo(y, catalog.RefCascade)(x)
		f.storeAnyway(x)
		p, err := f.c.Delete(f.ctx, x.Key(), gc.DeleteOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 1, p.Count(gc.ActionBlocked), "%+v", p.Entries)
		require.Equal(t, "cycle: Node/prod/x owns Node/prod/y; Node/prod/x holds a cascade reference to Node/prod/y: none of them can be purged before the others",
			p.Entries[len(p.Entries)-1].Reason)
	})
}

// TestAReferencePinnedToAPurgedTargetIsDanglingWhenItsNameIsTakenAgain:
// describe's reference states: a reference whose target is gone is
// dangling; one that names the UID of a purged target stays dangling when
// a new resource takes the name, while one that names no UID follows the
// name.
func TestAReferencePinnedToAPurgedTargetIsDanglingWhenItsNameIsTakenAgain(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		tg := f.res("Volume", "v")
		pinned := f.res("Pod", "pinned", pinnedRefTo(tg, tg.UID, catalog.RefAllowDangling))
		byName := f.res("Pod", "byname", refTo(tg, catalog.RefAllowDangling))
		states := func(r *catalog.Resource) gc.ReferenceState {
			t.Helper()
			s, err := gc.References(f.ctx, f.st, f.get(r))
			require.NoError(t, err)
			require.Len(t, s, 1)
			return s[0]
		}
		require.Equal(t, catalog.PhaseActive, states(pinned).TargetPhase)
		require.False(t, states(pinned).Dangling)

		require.Equal(t, gc.OutcomePurged, f.del(tg, gc.Foreground))
		require.True(t, states(pinned).Dangling)
		require.True(t, states(byName).Dangling)

		f.res("Volume", "v")
		require.True(t, states(pinned).Dangling, "the name now holds another resource")
		require.False(t, states(byName).Dangling)
		require.Equal(t, catalog.PhaseActive, states(byName).TargetPhase)
	})
}
