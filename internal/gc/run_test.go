package gc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// runCollector runs c.Run until the test ends.
func runCollector(t *testing.T, c *gc.Collector) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// waitPurged waits (on the change feed's effect) until r is purged.
func (f *fixture) waitPurged(rs ...*catalog.Resource) {
	f.t.Helper()
	for _, r := range rs {
		require.Eventually(f.t, func() bool {
			_, err := f.st.Get(f.ctx, r.Key())
			return errors.Is(err, catalog.ErrNotFound)
		}, 30*time.Second, 10*time.Millisecond, "%s not purged", r.Key())
	}
	f.requirePurged(rs...)
}

// TestRunFollowsTheFeed: the continuous collector carries out a deletion
// requested elsewhere (async), picks up a resource that reached Deleting
// through the grace-window timers' path, and wakes an owner when the
// finalizer of its dependent is removed.
func TestRunFollowsTheFeed(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		// Already Deleting before the collector starts.
		early := f.res("Widget", "early")
		_, err := gc.EnterDeleting(f.st).Delete(f.ctx, early.Key(), catalog.DeleteOptions{})
		require.NoError(t, err)
		// In a batch too: each gets the collector's finalizers.
		many := []*catalog.Resource{f.res("Widget", "early-1"), f.res("Widget", "early-2")}
		out, errs, err := gc.EnterDeleting(f.st).DeleteMany(f.ctx, []catalog.DeleteItem{{Key: many[0].Key()},
			{Key: many[1].Key(), Options: catalog.DeleteOptions{Finalizers: []string{"example.com/own"}}}})
		require.NoError(t, err)
		require.Equal(t, []error{nil, nil}, errs)
		require.Equal(t, gc.Finalizers, out[0].Finalizers)
		require.Equal(t, append([]string{"example.com/own"}, gc.Finalizers...), out[1].Finalizers)
		require.NoError(t, gc.Finalize(f.ctx, f.st, many[1].Key(), "example.com/own"))
		runCollector(t, f.c)
		f.waitPurged(append(many, early)...)

		o := f.res("Schedule", "nightly")
		a := f.res("Backupset", "a", ownedBy(o, true), finalizer("example.com/drain"))
		_, err = f.c.Delete(f.ctx, o.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return stuck(f.get(o)) != nil }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, gc.Finalize(f.ctx, f.st, a.Key(), "example.com/drain"))
		f.waitPurged(a, o)

		// The grace-window timers move resources with EnterDeleting.
		w := f.res("Widget", "late", func(r *catalog.Resource) { r.Annotations = map[string]string{catalog.AnnotationDeletionDelay: "1h"} })
		_, err = f.c.Delete(f.ctx, w.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		f.requirePhase(w, catalog.PhaseScheduled)
		// Asked again without --force: still in its grace window.
		p, err := f.c.Delete(f.ctx, w.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		require.NotNil(t, p.ScheduledUntil)
		f.requirePhase(w, catalog.PhaseScheduled)
		x, err := gc.EnterDeleting(f.st).Delete(f.ctx, w.Key(), catalog.DeleteOptions{Force: true, OnlyIfScheduled: true})
		require.NoError(t, err)
		require.Equal(t, gc.Finalizers, x.Finalizers)
		f.waitPurged(w)
	})
}

// TestDriveStopsServerCarriesOn: a driver that stops mid-cascade (its
// context ends) leaves nothing behind that the continuous collector does
// not finish.
func TestDriveStopsServerCarriesOn(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		o := f.res("Schedule", "nightly")
		var deps []*catalog.Resource
		for i := range 50 {
			deps = append(deps, f.res("Backupset", "b"+string(rune('a'+i%26))+string(rune('a'+i/26)), ownedBy(o, true)))
		}
		_, err := f.c.Delete(f.ctx, o.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(f.ctx)
		cancel() // stops at once
		_, err = f.c.Drive(ctx, o.Key(), gc.DriveOptions{})
		require.ErrorIs(t, err, context.Canceled)

		c2, err := gc.New(gc.Config{Store: st, NoPlugins: true, Holder: "server", PollInterval: 20 * time.Millisecond, LeaseTTL: time.Second})
		require.NoError(t, err)
		runCollector(t, c2)
		f.waitPurged(append(deps, o)...)
	})
}

// TestBackupInGraph: a Backup can own and be owned. Deleting an owner
// queues its Backup dependents for the backup deletion pipeline (which
// runs their items and purges them); a Backup's own dependents follow it.
func TestBackupInGraph(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		sched := f.res("Schedule", "nightly")
		bk := f.res(gc.BackupKind, "nightly-0412", ownedBy(sched, false))
		snap := f.res("VolumeSnapshot", "snap-a", ownedBy(bk, true))
		_, err := f.c.Delete(f.ctx, sched.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		f.drive(sched)
		f.requirePurged(sched, snap)
		x := f.requirePhase(bk, catalog.PhaseDeleting)
		require.Equal(t, []string{catalog.FinalizerDeleteActions}, x.Finalizers, "the pipeline's finalizer only: its cascade is done")
		_, err = f.st.GetWork(f.ctx, gc.BackupQueue, bk.UID)
		require.NoError(t, err, "queued for the backup deletion pipeline")
	})
}
