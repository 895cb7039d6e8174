package gc_test

import (
	"context"
	"time"

	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// TestForegroundWaitsForBlockingDependents: the owner enters Deleting
// with lethe.io/cascade, its dependents are deleted, and it is purged only
// after every dependent with blockOwnerDeletion (and theirs, recursively).
func TestForegroundWaitsForBlockingDependents(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("Schedule", "nightly")
		a := f.res("Backupset", "a", ownedBy(o, true))
		b := f.res("Backupset", "b", ownedBy(o, false))
		g := f.res("Snapshot", "g", ownedBy(a, true))

		_, err := f.c.Delete(f.ctx, o.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		x := f.requirePhase(o, catalog.PhaseDeleting)
		require.Contains(t, x.Finalizers, catalog.FinalizerCascade)
		require.Equal(t, catalog.PropagationForeground, x.PropagationPolicy)

		require.Equal(t, gc.OutcomePurged, f.drive(o))
		f.requirePurged(o, a, b, g)
		order := f.purgeOrder()
		require.Less(t, order[g.UID], order[a.UID], "a dependent with blockOwnerDeletion goes first")
		require.Less(t, order[a.UID], order[o.UID])
	})
}

// TestForegroundHeldByBlockingDependent: a blocking dependent held by a
// user finalizer holds its owner, which is stuck with the chain; a
// non-blocking one does not.
func TestForegroundHeldByBlockingDependent(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("Schedule", "nightly")
		a := f.res("Backupset", "a", ownedBy(o, true), finalizer("example.com/drain"))
		require.Equal(t, gc.OutcomeStuck, f.del(o, gc.Foreground))
		x := f.requirePhase(o, catalog.PhaseDeleting)
		c := stuck(x)
		require.NotNil(t, c, "the owner is stuck")
		require.Equal(t, "DependentStuck", c.Reason)
		require.Contains(t, c.Message, "Schedule/prod/nightly waits for its dependent Backupset/prod/a")
		require.Contains(t, c.Message, "example.com/drain")
		require.NotNil(t, stuck(f.requirePhase(a, catalog.PhaseDeleting)))

		require.NoError(t, gc.Finalize(f.ctx, f.st, a.Key(), "example.com/drain"))
		require.Equal(t, gc.OutcomePurged, f.drive(o))
		f.requirePurged(o, a)
		order := f.purgeOrder()
		require.Less(t, order[a.UID], order[o.UID])

		// Not blocking: the owner goes while the dependent waits.
		o2 := f.res("Schedule", "weekly")
		b := f.res("Backupset", "b", ownedBy(o2, false), finalizer("example.com/drain"))
		require.Equal(t, gc.OutcomePurged, f.del(o2, gc.Foreground))
		f.requirePurged(o2)
		f.requirePhase(b, catalog.PhaseDeleting)
	})
}

// TestBackground: the owner is purged as soon as its own finalizers
// allow; its dependents are deleted after, blocking or not.
func TestBackground(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("Schedule", "nightly")
		a := f.res("Backupset", "a", ownedBy(o, true), finalizer("example.com/drain"))
		b := f.res("Backupset", "b", ownedBy(o, false))
		require.Equal(t, gc.OutcomePurged, f.del(o, gc.Background))
		f.requirePurged(o, b)
		x := f.requirePhase(a, catalog.PhaseDeleting)
		require.Equal(t, catalog.PropagationBackground, x.PropagationPolicy)
		require.NoError(t, gc.Finalize(f.ctx, f.st, a.Key(), "example.com/drain"))
		require.Equal(t, gc.OutcomePurged, f.drive(a))
		f.requirePurged(a)
	})
}

// TestOrphan: dependents lose the owner edge and stay Active.
func TestOrphan(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("Schedule", "nightly")
		a := f.res("Backupset", "a", ownedBy(o, true))
		b := f.res("Backupset", "b", ownedBy(o, false))
		require.Equal(t, gc.OutcomePurged, f.del(o, gc.Orphan))
		f.requirePurged(o)
		for _, d := range []*catalog.Resource{a, b} {
			x := f.requirePhase(d, catalog.PhaseActive)
			require.Empty(t, x.Owners)
		}
	})
}

// TestMultipleOwners: under every policy, a dependent with another owner
// that remains only loses the edge; it goes with its last owner.
func TestMultipleOwners(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		for _, prop := range []gc.Propagation{gc.Foreground, gc.Background, gc.Orphan} {
			for _, block := range []bool{true, false} {
				f := newFixture(t, st, false)
				sfx := string(prop)
				if block {
					sfx += "-block"
				}
				// Backups are the deletion pipeline's to purge: here they
				// are plain owners, so use another kind.
				b1, b2 := f.res("Incremental", "inc-1-"+sfx), f.res("Incremental", "inc-2-"+sfx)
				snap := f.res("VolumeSnapshot", "shared-"+sfx, ownedBy(b1, block), ownedBy(b2, block))
				require.Equal(t, gc.OutcomePurged, f.del(b1, prop), "%s", sfx)
				x := f.requirePhase(snap, catalog.PhaseActive)
				require.Len(t, x.Owners, 1)
				require.Equal(t, b2.UID, x.Owners[0].UID)
				want := gc.OutcomePurged
				require.Equal(t, want, f.del(b2, gc.Foreground))
				f.requirePurged(b1, b2, snap)
			}
		}
	})
}

// TestReferences: block refuses a direct delete at once, naming the
// referrers; unset removes the reference (audited); cascade deletes the
// referrer; allowDangling leaves it.
func TestReferences(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		bk := f.res("Archive", "nightly-0412")
		restore := f.res("Restore", "r1", refTo(bk, catalog.RefBlock))
		restore2 := f.res("Restore", "r2", refTo(bk, catalog.RefBlock))

		_, err := f.c.Delete(f.ctx, bk.Key(), gc.DeleteOptions{})
		var refused *gc.RefusedError
		require.True(t, errors.As(err, &refused), "%v", err)
		require.ElementsMatch(t, []catalog.Key{restore.Key(), restore2.Key()}, refused.Referrers)
		require.Contains(t, err.Error(), "Restore/prod/r1")
		f.requirePhase(bk, catalog.PhaseActive)
		// Dry-run is refused the same way, and changes nothing either.
		_, err = f.c.Delete(f.ctx, bk.Key(), gc.DeleteOptions{DryRun: true})
		require.ErrorAs(t, err, &refused)

		db := f.res("Database", "orders")
		u := f.res("Report", "unset", refTo(db, catalog.RefUnset))
		c := f.res("Report", "cascade", refTo(db, catalog.RefCascade))
		cc := f.res("Chart", "of-cascade", ownedBy(c, true))
		d := f.res("Report", "dangling", refTo(db, catalog.RefAllowDangling))
		require.Equal(t, gc.OutcomePurged, f.del(db, gc.Foreground))
		f.requirePurged(db, c, cc)
		require.Empty(t, f.requirePhase(u, catalog.PhaseActive).References)
		require.Len(t, f.requirePhase(d, catalog.PhaseActive).References, 1)
		es, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{UID: u.UID})
		require.NoError(t, err)
		require.Equal(t, "unset-reference", es[len(es)-1].Action)
	})
}

// TestBlockInsideCascade is Goten's "C blocked by D": C is deleted by a
// cascade while D, Active, holds a block reference to it. C waits, is
// stuck with the chain, and explain says so; once D goes, C goes.
func TestBlockInsideCascade(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		a := f.res("App", "a")
		c := f.res("Volume", "c", ownedBy(a, true))
		d := f.res("Restore", "d", refTo(c, catalog.RefBlock))

		plan, err := f.c.Delete(f.ctx, a.Key(), gc.DeleteOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 1, plan.Count(gc.ActionBlocked))
		f.requirePhase(a, catalog.PhaseActive)

		require.Equal(t, gc.OutcomeStuck, f.del(a, gc.Foreground))
		xc := f.requirePhase(c, catalog.PhaseDeleting)
		cond := stuck(xc)
		require.NotNil(t, cond)
		require.Equal(t, "BlockedByReferrer", cond.Reason)
		require.Equal(t, "Volume/prod/c is blocked by Restore/prod/d, which holds a block reference to it and is Active (not being deleted)", cond.Message)
		xa := f.requirePhase(a, catalog.PhaseDeleting)
		require.Contains(t, stuck(xa).Message, "App/prod/a waits for its dependent Volume/prod/c → Volume/prod/c is blocked by Restore/prod/d")

		e, err := f.c.Explain(f.ctx, c.Key())
		require.NoError(t, err)
		require.Equal(t, catalog.PhaseDeleting, e.Phase)
		require.Contains(t, e.Reason, "Volume/prod/c is blocked by Restore/prod/d (block reference)")
		require.Len(t, e.WaitingFor, 1)
		require.Equal(t, d.Key(), e.WaitingFor[0].Resource)
		require.Equal(t, catalog.PhaseActive, e.WaitingFor[0].Phase)
		require.True(t, e.WaitingFor[0].Stuck)
		require.Equal(t, "holds a block reference to Volume/prod/c, and is not being deleted; Active: not being deleted", e.WaitingFor[0].Reason)

		ea, err := f.c.Explain(f.ctx, a.Key())
		require.NoError(t, err)
		require.Len(t, ea.WaitingFor, 1)
		require.Equal(t, c.Key(), ea.WaitingFor[0].Resource)
		require.Equal(t, d.Key(), ea.WaitingFor[0].WaitingFor[0].Resource)

		// D goes; C, then A follow.
		require.Equal(t, gc.OutcomePurged, f.del(d, gc.Foreground))
		require.Equal(t, gc.OutcomePurged, f.drive(a))
		f.requirePurged(a, c, d)
		order := f.purgeOrder()
		require.Less(t, order[d.UID], order[c.UID], "no block bypassed")
	})
}

// TestUserFinalizer: a user finalizer holds the resource until Finalize;
// Lethe's own finalizers and resources not Deleting are refused.
func TestUserFinalizer(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		r := f.res("Bucket", "logs", finalizer("example.com/empty-first"))
		err := gc.Finalize(f.ctx, f.st, r.Key(), "example.com/empty-first")
		require.ErrorIs(t, err, gc.ErrNotDeleting)
		require.Equal(t, gc.OutcomeStuck, f.del(r, gc.Foreground))
		x := f.requirePhase(r, catalog.PhaseDeleting)
		require.Equal(t, "WaitingForFinalizer", stuck(x).Reason)
		require.ErrorIs(t, gc.Finalize(f.ctx, f.st, r.Key(), catalog.FinalizerCascade), gc.ErrReservedFinalizer)
		require.ErrorIs(t, gc.Finalize(f.ctx, f.st, r.Key(), "example.com/other"), catalog.ErrNotFound)
		require.NoError(t, gc.Finalize(f.ctx, f.st, r.Key(), "example.com/empty-first"))
		require.Equal(t, gc.OutcomePurged, f.drive(r))
		f.requirePurged(r)
	})
}

// TestACycleThatAroseAnywayIsReportedOnce: a cycle of waits stored past
// the catalog's check (by an earlier Lethe) — owner edges alone, or an
// owner edge and a block reference — is found by the collector: every
// resource of it gets DeletionStuck with reason Cycle and the cycle in
// one line, printed once; the audit log gets one deletion-cycle entry;
// Drive returns stuck; explain and the dry run say it; and stepping it
// again writes nothing more.
func TestACycleThatAroseAnywayIsReportedOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(x *catalog.Resource)
		want string
	}{
		{"owner edges", func(x *catalog.Resource) {
			x.Owners = append(x.Owners, catalog.OwnerRef{Kind: "Node", Name: "y", BlockOwnerDeletion: true})
		},
			"cycle: Node/prod/x owns Node/prod/y; Node/prod/y owns Node/prod/x: none of them can be purged before the others"},
		{"owner edge and block reference", func(x *catalog.Resource) {
			x.References = append(x.References, catalog.Reference{Kind: "Node", Namespace: "prod", Name: "y", OnTargetDelete: catalog.RefBlock})
		}, "cycle: Node/prod/x owns Node/prod/y; Node/prod/x holds a block reference to Node/prod/y: none of them can be purged before the others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onDrivers(t, func(t *testing.T, st catalog.Store) {
				f := newFixture(t, st, false)
				x := f.res("Node", "x")
				y := f.res("Node", "y", ownedBy(x, true))
				x = f.get(x)
				tc.make(x)
				for i := range x.Owners {
					x.Owners[i].UID = y.UID
				}
				f.storeAnyway(x)

				p, err := f.c.Delete(f.ctx, x.Key(), gc.DeleteOptions{DryRun: true})
				require.NoError(t, err)
				require.Equal(t, 1, p.Count(gc.ActionBlocked), "%+v", p.Entries)
				require.Contains(t, p.Entries[len(p.Entries)-1].Reason, tc.want)

				_, err = f.c.Delete(f.ctx, x.Key(), gc.DeleteOptions{})
				require.NoError(t, err)
				// A cycle nobody finds would never end: 15 s is plenty.
				dctx, cancel := context.WithTimeout(f.ctx, 15*time.Second)
				out, err := f.c.Drive(dctx, x.Key(), gc.DriveOptions{})
				cancel()
				require.NoError(t, err, "Drive must return stuck, not run on")
				require.Equal(t, gc.OutcomeStuck, out)
				for _, r := range []*catalog.Resource{x, y} {
					cur := f.requirePhase(r, catalog.PhaseDeleting)
					require.NotNil(t, stuck(cur), "%s", r.Key())
					require.Equal(t, gc.ReasonCycle, stuck(cur).Reason)
					require.Equal(t, tc.want, stuck(cur).Message)
				}
				count := func() (cycles, updates int) {
					es, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{})
					require.NoError(t, err)
					for _, e := range es {
						switch e.Action {
						case gc.AuditCycle:
							cycles++
							require.Equal(t, tc.want, e.Reason)
						case "update":
							updates++
						}
					}
					return cycles, updates
				}
				cycles, updates := count()
				require.Equal(t, 1, cycles, "one audit entry for the cycle")
				require.LessOrEqual(t, updates, 2, "each resource's condition written once")
				e, err := f.c.Explain(f.ctx, x.Key())
				require.NoError(t, err)
				require.True(t, e.Stuck)
				require.Contains(t, e.Reason, tc.want)
				// Again: nothing new is written.
				require.Equal(t, gc.OutcomeStuck, f.drive(x))
				require.Equal(t, gc.OutcomeStuck, f.drive(y))
				c2, u2 := count()
				require.Equal(t, cycles, c2)
				require.Equal(t, updates, u2)
			})
		})
	}
}

// TestDeletingOnACycleOfBlockReferencesSaysCycle: r1 and r2 hold block
// references to each other (stored past the catalog's check): a delete
// of either is refused, and the refusal names the cycle.
func TestDeletingOnACycleOfBlockReferencesSaysCycle(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		r1 := f.res("R", "r1")
		r2 := f.res("R", "r2", refTo(r1, catalog.RefBlock))
		r1 = f.get(r1)
		refTo(r2, catalog.RefBlock)(r1)
		f.storeAnyway(r1)
		_, err := f.c.Delete(f.ctx, r1.Key(), gc.DeleteOptions{})
		var re *gc.RefusedError
		require.ErrorAs(t, err, &re)
		require.Contains(t, err.Error(), "cycle: R/prod/r2 holds a block reference to R/prod/r1; R/prod/r1 holds a block reference to R/prod/r2")
		f.requirePhase(r1, catalog.PhaseActive)
	})
}

// TestDryRunPlan lists every resource and changes nothing.
func TestDryRunPlan(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, true)
		o := f.res("Schedule", "nightly")
		f.res("Pod", "a", ownedBy(o, true))
		other := f.res("Schedule", "weekly")
		f.res("Pod", "shared", ownedBy(o, false), ownedBy(other, false))
		f.res("Report", "u", refTo(o, catalog.RefUnset))
		v0, err := f.st.CurrentVersion(f.ctx)
		require.NoError(t, err)
		p, err := f.c.Delete(f.ctx, o.Key(), gc.DeleteOptions{DryRun: true})
		require.NoError(t, err)
		v1, err := f.st.CurrentVersion(f.ctx)
		require.NoError(t, err)
		require.Equal(t, v0, v1, "a dry run writes nothing")
		require.Equal(t, 2, p.Count(gc.ActionDelete))
		require.Equal(t, 1, p.Count(gc.ActionUnlink))
		require.Equal(t, 1, p.Count(gc.ActionUnset))
		plugins := map[string][]string{}
		for _, e := range p.Entries {
			plugins[e.Resource.Name+" "+e.Action] = e.Plugins
		}
		require.Equal(t, []string{"test.lethe.io/a-first", "test.lethe.io/b-second", "test.lethe.io/c-pods"}, plugins["a delete"])
		require.Equal(t, []string{"test.lethe.io/a-first", "test.lethe.io/b-second"}, plugins["nightly delete"])
		require.Contains(t, plugins, "shared unlink")
		require.Contains(t, plugins, "u unset")
	})
}
