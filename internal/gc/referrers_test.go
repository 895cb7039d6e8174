package gc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// gotenScenario: A is the target of cascade references from B and C; D
// (Active) holds a block reference to C.
func gotenScenario(f *fixture) (a, b, c, d *catalog.Resource) {
	a = f.res("Account", "a")
	b = f.res("Project", "b", refTo(a, catalog.RefCascade))
	c = f.res("Project", "c", refTo(a, catalog.RefCascade))
	d = f.res("Restore", "d", refTo(c, catalog.RefBlock))
	return a, b, c, d
}

// TestForegroundTargetWaitsForItsCascadeReferrers: under Foreground, the
// target of cascade references stays Deleting, with its cascade
// finalizer, until every such referrer is purged; its DeletionStuck
// names the chain A → C → D, and explain shows it as a tree. Once D goes,
// the rest follows.
func TestForegroundTargetWaitsForItsCascadeReferrers(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		a, b, c, d := gotenScenario(f)
		require.Equal(t, gc.OutcomeStuck, f.del(a, gc.Foreground))
		f.requirePurged(b)
		xc := f.requirePhase(c, catalog.PhaseDeleting)
		require.Equal(t, "BlockedByReferrer", stuck(xc).Reason)
		xa := f.requirePhase(a, catalog.PhaseDeleting)
		require.Contains(t, xa.Finalizers, catalog.FinalizerCascade)
		require.NotNil(t, stuck(xa))
		require.Equal(t, gc.ReasonReferrerStuck, stuck(xa).Reason)
		require.Equal(t, "Account/prod/a waits for Project/prod/c, which holds a cascade reference to it → "+
			"Project/prod/c is blocked by Restore/prod/d, which holds a block reference to it and is Active (not being deleted)", stuck(xa).Message)

		e, err := f.c.Explain(f.ctx, a.Key())
		require.NoError(t, err)
		require.True(t, e.Stuck)
		require.Contains(t, e.Reason, "waiting for 1 referrer with a cascade reference to it (Foreground): Project/prod/c")
		require.Len(t, e.WaitingFor, 1)
		require.Equal(t, c.Key(), e.WaitingFor[0].Resource)
		require.Len(t, e.WaitingFor[0].WaitingFor, 1)
		require.Equal(t, d.Key(), e.WaitingFor[0].WaitingFor[0].Resource)

		require.Equal(t, gc.OutcomePurged, f.del(d, gc.Foreground))
		require.Equal(t, gc.OutcomePurged, f.drive(a))
		f.requirePurged(a, c, d)
		order := f.purgeOrder()
		require.Less(t, order[c.UID], order[a.UID], "the target is purged after its cascade referrer")
	})
}

// TestBackgroundTargetIsPurgedAtOnceAndExplainsWhatItSetOff: under
// Background the target is purged at once; explain on it shows the
// tombstone and the referrer its deletion set off that is not finished
// (C, held by D).
func TestBackgroundTargetIsPurgedAtOnceAndExplainsWhatItSetOff(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		a, b, c, d := gotenScenario(f)
		f.del(a, gc.Background)
		f.requirePurged(a, b)
		f.requirePhase(c, catalog.PhaseDeleting)
		e, err := f.c.Explain(f.ctx, a.Key())
		require.NoError(t, err)
		require.Equal(t, catalog.PhasePurged, e.Phase)
		require.Contains(t, e.Reason, "what its deletion set off is not finished: 1 resource")
		require.Len(t, e.WaitingFor, 1)
		require.Equal(t, c.Key(), e.WaitingFor[0].Resource)
		require.Contains(t, e.WaitingFor[0].Reason, "held a cascade reference to Account/prod/a")
		require.Equal(t, d.Key(), e.WaitingFor[0].WaitingFor[0].Resource)
	})
}

// TestUnsetRemovesOnlyTheDeletedTargetsReference: an unset referrer of
// the deleted target loses that one reference, before the target is
// purged; its unset reference to another target, and its other
// references, stay.
func TestUnsetRemovesOnlyTheDeletedTargetsReference(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		a := f.res("Account", "a")
		z := f.res("Account", "z")
		u := f.res("Report", "u", refTo(a, catalog.RefUnset), refTo(z, catalog.RefUnset), refTo(z, catalog.RefAllowDangling))
		require.Equal(t, gc.OutcomePurged, f.del(a, gc.Foreground))
		f.requirePurged(a)
		xu := f.requirePhase(u, catalog.PhaseActive)
		require.Equal(t, []catalog.Reference{
			{Kind: "Account", Namespace: "prod", Name: "z", OnTargetDelete: catalog.RefUnset},
			{Kind: "Account", Namespace: "prod", Name: "z", OnTargetDelete: catalog.RefAllowDangling},
		}, xu.References)
		es, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{})
		require.NoError(t, err)
		var unsetAt, purgeAt int64
		for _, e := range es {
			switch {
			case e.Action == "unset-reference" && e.UID == u.UID:
				unsetAt = e.ID
			case e.Action == "purge" && e.UID == a.UID:
				purgeAt = e.ID
			}
		}
		require.NotZero(t, unsetAt)
		require.Less(t, unsetAt, purgeAt, "the reference is unset before the target is purged")
	})
}

// TestSupersededStepDoesNotWrite: a collector step whose claim was
// superseded (another holder claimed the item since) writes nothing: the
// fence of its claim refuses every write, and the step ends quietly.
func TestSupersededStepDoesNotWrite(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d := f.res("Volume", "d", ownedBy(o, true))
		_, err := f.st.Delete(f.ctx, o.Key(), catalog.DeleteOptions{Propagation: catalog.PropagationForeground, Finalizers: []string{catalog.FinalizerCascade}})
		require.NoError(t, err)
		_, err = f.st.Enqueue(f.ctx, catalog.WorkItem{Queue: gc.Queue, Key: o.UID, RunAt: time.Now()})
		require.NoError(t, err)
		stale, err := f.st.ClaimKey(f.ctx, gc.Queue, o.UID, "first", time.Minute)
		require.NoError(t, err)
		// The first holder is taken for dead; another takes the item over.
		require.NoError(t, f.st.Release(f.ctx, stale.Fence(), time.Now(), "taken over"))
		_, err = f.st.ClaimKey(f.ctx, gc.Queue, o.UID, "second", time.Minute)
		require.NoError(t, err)
		v0, err := f.st.CurrentVersion(f.ctx)
		require.NoError(t, err)

		require.NoError(t, f.c.StepClaimed(f.ctx, stale), "losing the lease is not an error")
		v1, err := f.st.CurrentVersion(f.ctx)
		require.NoError(t, err)
		require.Equal(t, v0, v1, "the superseded step wrote nothing")
		f.requirePhase(d, catalog.PhaseActive)
		f.requirePhase(o, catalog.PhaseDeleting)
	})
}

// TestOwnerPurgedOutsideAStepLeavesADependentWithAnotherOwner: a
// dependent with two owners is not deleted when one owner is purged
// outside a collector step (by the catalog directly, as the backup
// pipeline purges a Backup): it only loses that owner's edge.
func TestOwnerPurgedOutsideAStepLeavesADependentWithAnotherOwner(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o1 := f.res("Schedule", "o1")
		o2 := f.res("Schedule", "o2")
		d := f.res("Snapshot", "d", ownedBy(o1, true), ownedBy(o2, true))
		_, err := f.st.Delete(f.ctx, o1.Key(), catalog.DeleteOptions{})
		require.NoError(t, err)
		require.NoError(t, f.st.Purge(f.ctx, o1.Key(), catalog.PurgeOptions{}))
		ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
		defer cancel()
		out, err := f.c.Drive(ctx, o1.Key(), gc.DriveOptions{UID: o1.UID})
		require.NoError(t, err)
		require.Equal(t, gc.OutcomePurged, out)
		x := f.requirePhase(d, catalog.PhaseActive)
		require.Len(t, x.Owners, 1)
		require.Equal(t, o2.UID, x.Owners[0].UID)
	})
}

// TestScheduledOwnerRemains: a Scheduled owner is not gone (it can still
// be undeleted): the dependent of an owner being deleted that also has a
// Scheduled owner only loses the deleted owner's edge.
func TestScheduledOwnerRemains(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o1 := f.res("Schedule", "o1")
		o2 := f.res("Schedule", "o2")
		d := f.res("Snapshot", "d", ownedBy(o1, true), ownedBy(o2, true))
		_, err := f.st.Schedule(f.ctx, o2.Key(), catalog.ScheduleOptions{Delay: time.Hour})
		require.NoError(t, err)
		p, err := f.c.Delete(f.ctx, o1.Key(), gc.DeleteOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 1, p.Count(gc.ActionUnlink), "the dry run says so too")
		require.Equal(t, gc.OutcomePurged, f.del(o1, gc.Foreground))
		x := f.requirePhase(d, catalog.PhaseActive)
		require.Len(t, x.Owners, 1)
		require.Equal(t, o2.UID, x.Owners[0].UID)
	})
}

// TestScheduledBlockReferrerHolds: a Scheduled block referrer is not gone:
// a direct delete of its target is refused, naming it, and inside a
// cascade the target waits for it (stuck), unpurged.
func TestScheduledBlockReferrerHolds(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		tgt := f.res("Volume", "t", ownedBy(o, true))
		x := f.res("Restore", "x", refTo(tgt, catalog.RefBlock))
		_, err := f.st.Schedule(f.ctx, x.Key(), catalog.ScheduleOptions{Delay: time.Hour})
		require.NoError(t, err)
		_, err = f.c.Delete(f.ctx, tgt.Key(), gc.DeleteOptions{})
		var re *gc.RefusedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, []catalog.Key{x.Key()}, re.Referrers)
		require.Equal(t, gc.OutcomeStuck, f.del(o, gc.Foreground))
		xt := f.requirePhase(tgt, catalog.PhaseDeleting)
		require.Equal(t, "BlockedByReferrer", stuck(xt).Reason)
		require.Contains(t, stuck(xt).Message, "is Scheduled (not being deleted)")
		f.requirePhase(o, catalog.PhaseDeleting)
	})
}

func delay(d string) func(*catalog.Resource) {
	return func(r *catalog.Resource) {
		r.Annotations = map[string]string{catalog.AnnotationDeletionDelay: d}
	}
}

// TestCascadeKeepsGraceWindows: a dependent or a cascade referrer with
// its own lethe.io/deletion-delay goes to Scheduled when the cascade
// reaches it (the dry run says so), can be undeleted meanwhile, and a
// Foreground owner waits for it (WaitingForGraceWindow, the countdown in
// explain); what has no delay goes at once.
func TestCascadeKeepsGraceWindows(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d1 := f.res("Volume", "d1", ownedBy(o, true), delay("1h"))
		d2 := f.res("Volume", "d2", ownedBy(o, true))
		x := f.res("Report", "x", refTo(o, catalog.RefCascade), delay("2h"))
		p, err := f.c.Delete(f.ctx, o.Key(), gc.DeleteOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 2, p.Count(gc.ActionSchedule), "%+v", p.Entries)
		require.Equal(t, 2, p.Count(gc.ActionDelete))

		start := time.Now()
		require.Equal(t, gc.OutcomeStuck, f.del(o, gc.Foreground))
		f.requirePurged(d2)
		xd1 := f.requirePhase(d1, catalog.PhaseScheduled)
		require.WithinDuration(t, start.Add(time.Hour), *xd1.DeletionDueAt, time.Minute)
		xx := f.requirePhase(x, catalog.PhaseScheduled)
		require.WithinDuration(t, start.Add(2*time.Hour), *xx.DeletionDueAt, time.Minute)
		xo := f.requirePhase(o, catalog.PhaseDeleting)
		require.Equal(t, gc.ReasonGraceWindow, stuck(xo).Reason)
		e, err := f.c.Explain(f.ctx, o.Key())
		require.NoError(t, err)
		require.Len(t, e.WaitingFor, 2)
		require.Contains(t, e.WaitingFor[0].Reason, "the grace window ends at")
		_, err = f.st.Undelete(f.ctx, x.Key(), "kept")
		require.NoError(t, err, "undeletable inside its window")
	})
}

// TestForceOnTheRootSkipsEveryWindowOfItsCascade: --force on the root
// skips the grace windows its cascade reaches, at every depth, each
// audited as a force-delete saying so.
func TestForceOnTheRootSkipsEveryWindowOfItsCascade(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d1 := f.res("Volume", "d1", ownedBy(o, true), delay("1h"))
		d3 := f.res("Disk", "d3", ownedBy(d1, true), delay("1h"))
		x := f.res("Report", "x", refTo(o, catalog.RefCascade), delay("2h"))
		p, err := f.c.Delete(f.ctx, o.Key(), gc.DeleteOptions{DryRun: true, Force: true})
		require.NoError(t, err)
		require.Equal(t, 0, p.Count(gc.ActionSchedule))
		_, err = f.c.Delete(f.ctx, o.Key(), gc.DeleteOptions{Force: true})
		require.NoError(t, err)
		require.Equal(t, gc.OutcomePurged, f.drive(o))
		f.requirePurged(o, d1, d3, x)
		es, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{})
		require.NoError(t, err)
		skippedFor := map[string]bool{}
		for _, e := range es {
			if e.Action == "force-delete" && strings.Contains(e.Reason, "grace window skipped") {
				skippedFor[e.Name] = true
			}
		}
		require.Equal(t, map[string]bool{"d1": true, "d3": true, "x": true}, skippedFor)
	})
}

// TestExplainIsFresh: explain reads the live graph: a blocker purged
// since the collector last stepped its target is not shown (nor its
// wait row in the retry queue), and the target is not marked stuck.
func TestExplainIsFresh(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		a, _, c, d := gotenScenario(f)
		require.Equal(t, gc.OutcomeStuck, f.del(a, gc.Foreground))
		e, err := f.c.Explain(f.ctx, c.Key())
		require.NoError(t, err)
		require.True(t, e.Stuck)
		require.Len(t, e.Retries, 1)
		// d goes without any collector step of c.
		_, err = f.st.Delete(f.ctx, d.Key(), catalog.DeleteOptions{})
		require.NoError(t, err)
		require.NoError(t, f.st.Purge(f.ctx, d.Key(), catalog.PurgeOptions{}))
		e, err = f.c.Explain(f.ctx, c.Key())
		require.NoError(t, err)
		require.False(t, e.Stuck, "%s", e.Reason)
		require.Empty(t, e.Retries)
		require.Empty(t, e.WaitingFor)
		require.NotContains(t, e.Reason, "Restore/prod/d")
		e, err = f.c.Explain(f.ctx, a.Key())
		require.NoError(t, err)
		require.False(t, e.Stuck, "nothing below it is stuck any more")
	})
}

// TestCascadeDeletionsAreAuditedAsCascadeDeletes: what a cascade moves to
// Deleting is audited as a cascade-delete naming what reached it, not as
// a force-delete; the root is a delete.
func TestCascadeDeletionsAreAuditedAsCascadeDeletes(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d := f.res("Volume", "d", ownedBy(o, true))
		f.res("Disk", "e", ownedBy(d, true)) // d is no leaf: it enters Deleting
		x := f.res("Report", "x", refTo(o, catalog.RefCascade), finalizer("example.com/keep"))
		require.Equal(t, gc.OutcomeStuck, f.del(o, gc.Foreground))
		es, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{})
		require.NoError(t, err)
		actions := map[string]string{}
		for _, e := range es {
			if e.ToPhase == catalog.PhaseDeleting && e.FromPhase != catalog.PhaseDeleting {
				actions[e.Name] = e.Action + ": " + e.Reason
			}
		}
		require.Equal(t, "delete: deletion requested", actions["o"])
		require.Equal(t, gc.AuditCascadeDelete+": owner App/prod/o deleted (Foreground)", actions["d"])
		require.Equal(t, gc.AuditCascadeDelete+": cascade reference to App/prod/o, which is being deleted", actions["x"])
		require.NoError(t, gc.Finalize(f.ctx, f.st, x.Key(), "example.com/keep"))
		require.Equal(t, gc.OutcomePurged, f.drive(o))
	})
}
