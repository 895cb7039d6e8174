package gc_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/registry"
)

// backupFixture is a catalog (SQLite or PostgreSQL), file storage, the
// recorder plugins as real subprocesses, the backup deletion pipeline and
// a collector that purges backups through it, as the CLI and the server
// wire them.
type backupFixture struct {
	*fixture
	blobs blobstore.Store
	reg   *registry.Registry
	del   *deletion.Deleter
}

func newBackupFixture(t *testing.T, st catalog.Store) *backupFixture {
	t.Helper()
	f := &fixture{t: t, ctx: catalog.WithActor(context.Background(), "test"), st: st}
	dir := t.TempDir()
	f.record, f.locks = filepath.Join(dir, "record.tsv"), filepath.Join(dir, "locks")
	require.NoError(t, os.MkdirAll(f.locks, 0o750))
	pdir := filepath.Join(dir, "plugins")
	require.NoError(t, os.MkdirAll(pdir, 0o750))
	require.NoError(t, os.Link(recorderBin, filepath.Join(pdir, "recorder")))
	h, err := pluginhost.New(&pluginhost.Config{Dir: pdir, PluginEnv: map[string]map[string]string{
		"recorder": {"LETHE_RECORD_FILE": f.record, "LETHE_RECORD_CONTROL_DIR": f.locks},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	bl, err := blobstore.Open(f.ctx, "file://"+filepath.Join(dir, "storage"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = bl.Close() })
	del, err := deletion.New(&deletion.Config{Store: st, Blobs: bl, Plugins: deletion.HostPlugins(h), LeaseTTL: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = del.Close() })
	reg, err := registry.New(&registry.Config{Store: st, Blobs: bl, Plugins: h})
	require.NoError(t, err)
	f.c, err = gc.New(gc.Config{
		Store: st, Plugins: gc.HostPlugins(h), PollInterval: 50 * time.Millisecond, Recheck: time.Hour, LeaseTTL: 5 * time.Second,
		PurgeBackup: func(ctx context.Context, r *catalog.Resource) error {
			_, err := del.Resume(ctx, r.UID, deletion.Options{})
			return err
		},
	})
	require.NoError(t, err)
	return &backupFixture{fixture: f, blobs: bl, reg: reg, del: del}
}

// backup registers a backup of a few items, as lethe backup create does.
func (b *backupFixture) backup(name string) *catalog.Resource {
	b.t.Helper()
	var buf bytes.Buffer
	require.NoError(b.t, archivetest.WriteN(&buf, 6, 200))
	res, err := b.reg.Create(b.ctx, registry.Request{Name: name, Tarball: bytes.NewReader(buf.Bytes())})
	require.NoError(b.t, err)
	return res.Backup.Resource
}

// tarball reports whether the backup's tarball is still in storage.
func (b *backupFixture) tarball(name string) bool {
	b.t.Helper()
	_, err := b.blobs.Stat(b.ctx, backup.StorageKey(name))
	if errors.Is(err, blobstore.ErrNotFound) {
		return false
	}
	require.NoError(b.t, err)
	return true
}

func (b *backupFixture) deleteBackup(name string, prop catalog.Propagation) *deletion.Report {
	b.t.Helper()
	rep, err := b.del.Delete(b.ctx, name, deletion.Options{Force: true, Propagation: prop})
	require.NoError(b.t, err)
	return rep
}

func (b *backupFixture) driveUID(r *catalog.Resource) gc.Outcome {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	out, err := b.c.Drive(ctx, r.Key(), gc.DriveOptions{UID: r.UID})
	require.NoError(b.t, err)
	return out
}

// TestBackupForegroundWaitsForDependents: a Backup deleted Foreground runs
// its items, then waits in Deleting, record and tarball kept, until no
// dependent with blockOwnerDeletion remains; a user finalizer on one of
// them holds it (stuck, explained); once lethe finalize releases it, the
// collector purges the dependent and then the backup, tarball included.
func TestBackupForegroundWaitsForDependents(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newBackupFixture(t, st)
		bk := f.backup("nightly-0412")
		held := f.res("VolumeSnapshot", "snap-a", ownedBy(bk, true), finalizer("example.com/drain"))
		free := f.res("VolumeSnapshot", "snap-b", ownedBy(bk, true))
		loose := f.res("VolumeSnapshot", "snap-c", ownedBy(bk, false))

		rep := f.deleteBackup(bk.Name, "")
		require.Equal(t, deletion.ResultWaiting, rep.Result, "items settled, the record waits")
		require.Len(t, rep.WaitingFor, 2, "%q", rep.WaitingFor)
		require.Contains(t, strings.Join(rep.WaitingFor, "; "), "VolumeSnapshot/prod/snap-a")
		x := f.requirePhase(bk, catalog.PhaseDeleting)
		require.Equal(t, []string{catalog.FinalizerCascade}, x.Finalizers)
		require.True(t, f.tarball(bk.Name), "the tarball stays while the backup waits")
		b, err := backup.FromResource(x)
		require.NoError(t, err)
		require.NotEmpty(t, b.Status.Deletion.WaitingFor, "describe shows the wait")

		// Running the pipeline again changes nothing: it still waits.
		rep, err = f.del.Delete(f.ctx, bk.Name, deletion.Options{})
		require.NoError(t, err)
		require.Equal(t, deletion.ResultWaiting, rep.Result)

		require.Equal(t, gc.OutcomeStuck, f.driveUID(bk))
		f.requirePurged(free, loose)
		f.requirePhase(held, catalog.PhaseDeleting)
		x = f.requirePhase(bk, catalog.PhaseDeleting)
		require.True(t, f.tarball(bk.Name), "never purged before a blocking dependent")
		require.NotNil(t, stuck(x))
		require.Equal(t, "DependentStuck", stuck(x).Reason)
		e, err := f.c.Explain(f.ctx, bk.Key())
		require.NoError(t, err)
		require.Contains(t, e.Reason, "waiting for 1 dependent with blockOwnerDeletion (Foreground)")
		require.Len(t, e.WaitingFor, 1)
		require.Equal(t, held.Key(), e.WaitingFor[0].Resource)
		require.Contains(t, e.WaitingFor[0].Reason, "example.com/drain")

		require.NoError(t, gc.Finalize(f.ctx, f.st, held.Key(), "example.com/drain"))
		require.Equal(t, gc.OutcomePurged, f.driveUID(bk))
		f.requirePurged(held, bk)
		require.False(t, f.tarball(bk.Name))
		order := f.purgeOrder()
		for _, d := range []*catalog.Resource{held, free} {
			require.Less(t, order[d.UID], order[bk.UID], "%s purged before its owner", d.Key())
		}
	})
}

// TestBackupBackground: Background purges the backup without waiting for
// its dependents; the collector deletes them after.
func TestBackupBackground(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newBackupFixture(t, st)
		bk := f.backup("nightly-0412")
		held := f.res("VolumeSnapshot", "snap-a", ownedBy(bk, true), finalizer("example.com/drain"))
		rep := f.deleteBackup(bk.Name, catalog.PropagationBackground)
		require.Equal(t, deletion.ResultWaiting, rep.Result, "its cascade is not handed on yet")
		require.Equal(t, gc.OutcomePurged, f.driveUID(bk))
		f.requirePurged(bk)
		require.False(t, f.tarball(bk.Name))
		x := f.requirePhase(held, catalog.PhaseDeleting)
		require.Contains(t, x.Finalizers, "example.com/drain", "deleted, not waited for")
		require.NoError(t, gc.Finalize(f.ctx, f.st, held.Key(), "example.com/drain"))
		require.Equal(t, gc.OutcomePurged, f.drive(held))
		f.requirePurged(held)
	})
}

// TestBackupOrphan: Orphan purges the backup; its dependents lose the
// owner edge and stay Active.
func TestBackupOrphan(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newBackupFixture(t, st)
		bk := f.backup("nightly-0412")
		a := f.res("VolumeSnapshot", "snap-a", ownedBy(bk, true))
		other := f.res("Schedule", "nightly")
		b := f.res("VolumeSnapshot", "snap-b", ownedBy(bk, false), ownedBy(other, true))
		f.deleteBackup(bk.Name, catalog.PropagationOrphan)
		require.Equal(t, gc.OutcomePurged, f.driveUID(bk))
		f.requirePurged(bk)
		require.False(t, f.tarball(bk.Name))
		require.Empty(t, f.requirePhase(a, catalog.PhaseActive).Owners)
		xb := f.requirePhase(b, catalog.PhaseActive)
		require.Len(t, xb.Owners, 1)
		require.Equal(t, other.UID, xb.Owners[0].UID)
		es, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{})
		require.NoError(t, err)
		n := 0
		for _, e := range es {
			if e.Action == "unlink-owner" && strings.Contains(e.Reason, "Orphan") {
				n++
			}
		}
		require.Equal(t, 2, n, "each orphaning audited")
	})
}

// TestBackupSharedSnapshot: a snapshot owned by two backups outlives the
// first (it only loses that edge) and goes with the second.
func TestBackupSharedSnapshot(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newBackupFixture(t, st)
		inc1, inc2 := f.backup("inc-1"), f.backup("inc-2")
		snap := f.res("VolumeSnapshot", "snap-a", ownedBy(inc1, true), ownedBy(inc2, true))
		f.deleteBackup(inc1.Name, "")
		require.Equal(t, gc.OutcomePurged, f.driveUID(inc1))
		f.requirePurged(inc1)
		x := f.requirePhase(snap, catalog.PhaseActive)
		require.Len(t, x.Owners, 1)
		require.Equal(t, inc2.UID, x.Owners[0].UID)
		require.True(t, f.tarball(inc2.Name))

		require.Equal(t, deletion.ResultWaiting, f.deleteBackup(inc2.Name, "").Result)
		require.Equal(t, gc.OutcomePurged, f.driveUID(inc2))
		f.requirePurged(snap, inc2)
		require.Less(t, f.purgeOrder()[snap.UID], f.purgeOrder()[inc2.UID])
	})
}

// TestBackupServerCarriesOn: a direct request to delete a backup that a
// live block referrer holds is refused; the daemon's is not. The
// continuous collector (lethe server) purges a backup whose pipeline run
// ended waiting, once a finalizer on its dependent is removed; the block
// referrer holds it the same way until it is deleted.
func TestBackupServerCarriesOn(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newBackupFixture(t, st)
		bk := f.backup("nightly-0412")
		held := f.res("VolumeSnapshot", "snap-a", ownedBy(bk, true), finalizer("example.com/drain"))
		restore := f.res("Restore", "r1", func(r *catalog.Resource) {
			r.Namespace = ""
			r.References = []catalog.Reference{{Kind: backup.Kind, Name: bk.Name, OnTargetDelete: catalog.RefBlock}}
		})
		// A direct request is refused at once, naming the referrer.
		_, err := f.del.Delete(f.ctx, bk.Name, deletion.Options{Force: true})
		var be *deletion.BlockedError
		require.ErrorAs(t, err, &be)
		require.Equal(t, []catalog.Key{restore.Key()}, be.Referrers)
		f.requirePhase(bk, catalog.PhaseActive)
		// The daemon's (a TTL's expiry) is not: the purge waits.
		rep, err := f.del.Delete(f.ctx, bk.Name, deletion.Options{Force: true, Unattended: true})
		require.NoError(t, err)
		require.Equal(t, deletion.ResultWaiting, rep.Result)
		runCollector(t, f.c)
		require.Eventually(t, func() bool { return stuck(f.get(held)) != nil }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, gc.Finalize(f.ctx, f.st, held.Key(), "example.com/drain"))
		f.waitPurged(held)
		// The restore's block reference still holds the backup.
		require.Eventually(t, func() bool {
			x := f.get(bk)
			return len(x.Finalizers) == 0 && stuck(x) != nil && stuck(x).Reason == "BlockedByReferrer"
		}, 30*time.Second, 10*time.Millisecond)
		require.True(t, f.tarball(bk.Name))
		_, err = f.c.Delete(f.ctx, restore.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		f.waitPurged(restore, bk)
		require.False(t, f.tarball(bk.Name))
	})
}

// TestBackupReachedByCascade: a Backup owned by a Schedule goes with it:
// the collector moves it to Deleting with the pipeline's finalizers, the
// pipeline runs its items, and the Schedule, Foreground, waits for it.
func TestBackupReachedByCascade(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newBackupFixture(t, st)
		sched := f.res("Schedule", "nightly", func(r *catalog.Resource) { r.Namespace = "" })
		bk := f.backup("nightly-0412")
		bk.Owners = []catalog.OwnerRef{{UID: sched.UID, Kind: sched.Kind, Name: sched.Name, BlockOwnerDeletion: true}}
		bk, err := f.st.Update(f.ctx, bk)
		require.NoError(t, err)
		snap := f.res("VolumeSnapshot", "snap-a", ownedBy(bk, true))
		_, err = f.c.Delete(f.ctx, sched.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		// The schedule's step moves the backup on, and carries its cascade.
		ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
		_, _ = f.c.Drive(ctx, sched.Key(), gc.DriveOptions{})
		cancel()
		f.requirePurged(snap)
		x := f.requirePhase(bk, catalog.PhaseDeleting)
		require.Equal(t, []string{catalog.FinalizerDeleteActions}, x.Finalizers)
		f.requirePhase(sched, catalog.PhaseDeleting)
		// The pipeline (lethe server's worker) runs the backup's items.
		w, err := f.st.ClaimKey(f.ctx, deletion.Queue, bk.UID, "worker", 5*time.Second)
		require.NoError(t, err)
		rep, err := f.del.RunWork(f.ctx, w, deletion.Options{})
		require.NoError(t, err)
		require.Equal(t, deletion.ResultPurged, rep.Result)
		require.Equal(t, gc.OutcomePurged, f.drive(sched))
		f.requirePurged(bk, sched)
	})
}

// TestBackupGraceWindowKeepsPolicy: a backup with a grace window is only
// Scheduled, with the propagation asked for; undelete still works, and a
// deletion after the window carries the policy.
func TestBackupGraceWindowKeepsPolicy(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newBackupFixture(t, st)
		bk := f.backup("nightly-0412")
		snap := f.res("VolumeSnapshot", "snap-a", ownedBy(bk, true))
		day := 24 * time.Hour
		rep, err := f.del.Delete(f.ctx, bk.Name, deletion.Options{Delay: &day, Propagation: catalog.PropagationOrphan})
		require.NoError(t, err)
		require.Equal(t, deletion.ResultScheduled, rep.Result)
		x := f.requirePhase(bk, catalog.PhaseScheduled)
		require.Equal(t, catalog.PropagationOrphan, x.PropagationPolicy)
		require.Empty(t, x.Finalizers)
		_, err = f.del.Undelete(f.ctx, bk.Name)
		require.NoError(t, err)
		f.requirePhase(bk, catalog.PhaseActive)
		f.requirePhase(snap, catalog.PhaseActive)

		_, err = f.del.Delete(f.ctx, bk.Name, deletion.Options{Delay: &day, Propagation: catalog.PropagationOrphan})
		require.NoError(t, err)
		// The window ends (the server's timer): the policy given at
		// scheduling holds.
		rep, err = f.del.Delete(f.ctx, bk.Name, deletion.Options{Force: true, OnlyIfScheduled: true})
		require.NoError(t, err)
		require.Equal(t, deletion.ResultWaiting, rep.Result)
		require.Equal(t, catalog.PropagationOrphan, f.requirePhase(bk, catalog.PhaseDeleting).PropagationPolicy)
		require.Equal(t, gc.OutcomePurged, f.driveUID(bk))
		f.requirePurged(bk)
		require.Empty(t, f.requirePhase(snap, catalog.PhaseActive).Owners)
	})
}

// TestExplainBackupWhileItsItemsRun: a Backup with no dependents whose
// items are still with the plugins waits for them, not for its cascade
// (the cascade finalizer goes after the plugins): explain names the
// plugins, never "its cascade is being carried out".
func TestExplainBackupWhileItsItemsRun(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newBackupFixture(t, st)
		bk := f.backup("nightly-0413")
		_, err := f.st.Delete(f.ctx, bk.Key(), catalog.DeleteOptions{Propagation: catalog.Propagation(gc.Foreground),
			Finalizers: []string{catalog.FinalizerDeleteActions, catalog.FinalizerCascade}})
		require.NoError(t, err)
		e, err := f.c.Explain(f.ctx, bk.Key())
		require.NoError(t, err)
		require.Contains(t, e.Reason, "its backup items are being deleted by the plugins")
		require.NotContains(t, e.Reason, "cascade is being carried out")
	})
}
