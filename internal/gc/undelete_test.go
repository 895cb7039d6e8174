package gc_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// TestUndeleteInsideACascadeLeavesIt: a dependent and a cascade referrer
// that a Foreground cascade put in their grace windows are undeleted
// while their owner (target) is still Deleting: they stay Active, out of
// its cascade (the owner edge and the cascade reference are gone,
// audited as leave-cascade), and the continuous collector, woken by the
// undelete, purges the owner without them — well before its recheck.
func TestUndeleteInsideACascadeLeavesIt(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d1 := f.res("Volume", "d1", ownedBy(o, true), delay("1h"))
		d2 := f.res("Volume", "d2", ownedBy(o, true))
		x := f.res("Report", "x", refTo(o, catalog.RefCascade), delay("2h"))
		runCollector(t, f.c)
		_, err := f.c.Delete(f.ctx, o.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			s := stuck(f.get(o))
			return s != nil && s.Reason == gc.ReasonGraceWindow && f.get(d1).Phase == catalog.PhaseScheduled && f.get(x).Phase == catalog.PhaseScheduled
		}, 30*time.Second, 10*time.Millisecond)
		f.requirePurged(d2)

		_, err = f.st.Undelete(f.ctx, d1.Key(), "still needed")
		require.NoError(t, err)
		_, err = f.st.Undelete(f.ctx, x.Key(), "still needed")
		require.NoError(t, err)
		// The fixture's recheck is an hour: only the undelete's own
		// change can wake the owner.
		require.Eventually(t, func() bool {
			_, err := f.st.Get(f.ctx, o.Key())
			return err != nil
		}, 10*time.Second, 10*time.Millisecond, "the owner is purged without what was undeleted")
		f.requirePurged(o)
		xd1 := f.requirePhase(d1, catalog.PhaseActive)
		require.Empty(t, xd1.Owners)
		require.Nil(t, xd1.DeletionRoot)
		xx := f.requirePhase(x, catalog.PhaseActive)
		require.Empty(t, xx.References)
		for _, r := range []*catalog.Resource{d1, x} {
			es, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{UID: r.UID})
			require.NoError(t, err)
			last := es[len(es)-1]
			require.Equal(t, catalog.AuditLeaveCascade, last.Action, "%s", r.Key())
			require.Contains(t, last.Reason, "App/prod/o (Deleting)")
		}
	})
}

// TestUndeleteAfterABackgroundOwnerIsGone: under Background the owner is
// purged at once, its dependent left Scheduled in its window; undeleted,
// the dependent loses the edge to the gone owner, and stays Active when
// the collector looks at that owner again.
func TestUndeleteAfterABackgroundOwnerIsGone(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d := f.res("Volume", "d", ownedBy(o, true), delay("1h"))
		f.del(o, gc.Background)
		f.requirePurged(o)
		require.NotNil(t, f.requirePhase(d, catalog.PhaseScheduled).DeletionRoot)
		runCollector(t, f.c)
		_, err := f.st.Undelete(f.ctx, d.Key(), "still needed")
		require.NoError(t, err)
		// The undelete's change wakes the gone owner's dependents'
		// handling: it finds none.
		require.Never(t, func() bool { return f.get(d).Phase != catalog.PhaseActive }, 1500*time.Millisecond, 20*time.Millisecond)
		require.Empty(t, f.get(d).Owners)
	})
}

// TestCascadeRootIsRecorded: every resource a cascade reaches records
// the cascade's root (DeletionRoot), at every depth, Scheduled or
// Deleting; its cascade-delete audit entry names it (in the reason below
// the first level, and in the details always); explain shows it, in the
// tree only where it is not the tree's own root; the tombstone keeps it.
func TestCascadeRootIsRecorded(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("App", "o")
		d := f.res("Volume", "d", ownedBy(o, true))
		e := f.res("Disk", "e", ownedBy(d, true), finalizer("example.com/keep"))
		s := f.res("Disk", "s", ownedBy(d, true), delay("1h"))
		x := f.res("Report", "x", refTo(d, catalog.RefCascade), finalizer("example.com/keep"))
		require.Equal(t, gc.OutcomeStuck, f.del(o, gc.Foreground))
		root := o.Ref()
		for _, r := range []*catalog.Resource{d, e, x} {
			require.Equal(t, &root, f.requirePhase(r, catalog.PhaseDeleting).DeletionRoot, "%s", r.Key())
		}
		require.Equal(t, &root, f.requirePhase(s, catalog.PhaseScheduled).DeletionRoot)
		require.Nil(t, f.get(o).DeletionRoot, "the root's own deletion was requested")

		es, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{})
		require.NoError(t, err)
		entries := map[string]catalog.AuditEntry{}
		for _, a := range es {
			if a.Action == gc.AuditCascadeDelete || a.Action == "schedule" {
				entries[a.Name] = a
			}
		}
		require.Equal(t, "owner App/prod/o deleted (Foreground)", entries["d"].Reason)
		require.Equal(t, "owner Volume/prod/d deleted (Foreground), in the cascade of App/prod/o", entries["e"].Reason)
		require.Equal(t, "cascade reference to Volume/prod/d, which is being deleted, in the cascade of App/prod/o", entries["x"].Reason)
		require.Equal(t, "schedule", entries["s"].Action)
		require.Contains(t, entries["s"].Reason, "in the cascade of App/prod/o")
		for _, n := range []string{"d", "e", "x", "s"} {
			var det struct {
				Root catalog.ObjectRef `json:"deletionRoot"`
			}
			require.NoError(t, json.Unmarshal(entries[n].Details, &det), n)
			require.Equal(t, root, det.Root, n)
		}

		ex, err := f.c.Explain(f.ctx, e.Key())
		require.NoError(t, err)
		require.Equal(t, &root, ex.DeletionRoot)
		var buf bytes.Buffer
		require.NoError(t, gc.WriteTree(&buf, ex))
		require.True(t, strings.HasPrefix(buf.String(), "Disk/prod/e (Deleting, in the cascade of App/prod/o) [stuck]: "), buf.String())
		eo, err := f.c.Explain(f.ctx, o.Key())
		require.NoError(t, err)
		require.Equal(t, &root, eo.WaitingFor[0].DeletionRoot)
		buf.Reset()
		require.NoError(t, gc.WriteTree(&buf, eo))
		require.NotContains(t, buf.String(), "in the cascade of", "inside its own root's tree, a cascade is not named again:\n%s", buf.String())

		require.NoError(t, gc.Finalize(f.ctx, f.st, e.Key(), "example.com/keep"))
		require.NoError(t, gc.Finalize(f.ctx, f.st, x.Key(), "example.com/keep"))
		f.drive(o)
		f.requirePurged(e)
		ts, err := f.st.GetTombstone(f.ctx, e.Key())
		require.NoError(t, err)
		require.Equal(t, &root, ts.DeletionRoot)
		ex, err = f.c.Explain(f.ctx, e.Key())
		require.NoError(t, err)
		require.Equal(t, &root, ex.DeletionRoot)
	})
}
