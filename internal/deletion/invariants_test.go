package deletion_test

// The tests of this file pin the mechanisms behind DESIGN §7's invariants,
// each with no timing luck: the test decides, through a gate around the
// real plugin sessions and hooks in the pipeline, when a plugin's ack
// reaches the pipeline and when the lease is taken away. Each has a
// mutation under mutants/ that it must catch.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/pkg/plugin"
)

// gate wraps the plugins given to a Deleter. The plugins are the real
// recorder subprocesses; the gate only holds chosen results (a plugin's
// ack of one item) until the test releases them, and records what was
// sent. It is in-process because only the test can say when.
type gate struct {
	pluginSet
	mu    sync.Mutex
	holds map[holdKey]*hold
	sent  map[int64]string // ordinal → item key
}

// pluginSet names deletion.Plugins for embedding: a field named Plugins
// would clash with its method.
type pluginSet = deletion.Plugins

type holdKey struct {
	plugin string
	id     uint64
}

// hold is one held ack: arrived is closed when the plugin has answered
// (the item is executed), and the answer goes on once release is closed.
type hold struct {
	arrived, release chan struct{}
}

func newGate(p deletion.Plugins) *gate {
	return &gate{pluginSet: p, holds: map[holdKey]*hold{}, sent: map[int64]string{}}
}

// hold holds the first result of the named plugin for the item at ordinal.
func (g *gate) hold(plugin string, ordinal int64) *hold {
	h := &hold{arrived: make(chan struct{}), release: make(chan struct{})}
	g.mu.Lock()
	g.holds[holdKey{plugin, uint64(ordinal)}] = h
	g.mu.Unlock()
	return h
}

func (g *gate) take(plugin string, id uint64) *hold {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.holds[holdKey{plugin, id}]
	delete(g.holds, holdKey{plugin, id})
	return h
}

func (g *gate) keyOf(ordinal int64) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sent[ordinal]
}

func (g *gate) Open(ctx context.Context, name string, b plugin.Backup, opts pluginhost.SessionOptions) (deletion.Session, error) {
	s, err := g.pluginSet.Open(ctx, name, b, opts)
	if err != nil {
		return nil, err
	}
	gs := &gatedSession{Session: s, g: g, name: name, out: make(chan pluginhost.Result), stop: make(chan struct{})}
	go gs.forward()
	return gs, nil
}

type gatedSession struct {
	deletion.Session
	g        *gate
	name     string
	out      chan pluginhost.Result
	stop     chan struct{}
	stopOnce sync.Once
}

func (s *gatedSession) Send(ctx context.Context, it pluginhost.Item) error {
	s.g.mu.Lock()
	s.g.sent[int64(it.ID)] = it.Item.GroupResource() + "/" + it.Item.Namespace + "/" + it.Item.Name
	s.g.mu.Unlock()
	return s.Session.Send(ctx, it)
}

func (s *gatedSession) Results() <-chan pluginhost.Result { return s.out }

func (s *gatedSession) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.Session.Close()
}

func (s *gatedSession) forward() {
	var held sync.WaitGroup
	defer func() {
		held.Wait()
		close(s.out)
	}()
	for r := range s.Session.Results() {
		if h := s.g.take(s.name, r.ID); h != nil {
			close(h.arrived)
			held.Go(func() {
				select {
				case <-h.release:
					select {
					case s.out <- r:
					case <-s.stop:
					}
				case <-s.stop:
				}
			})
			continue
		}
		select {
		case s.out <- r:
		case <-s.stop:
			return
		}
	}
}

// watchedStore counts the catalog writes that succeed once armed, and
// lets a test act right after a checkpoint or a finalizer removal.
type watchedStore struct {
	catalog.Store
	armed  atomic.Bool
	writes atomic.Int64

	afterCheckpoint      func(c catalog.Checkpoint)
	afterRemoveFinalizer func()
	renew                func(ctx context.Context, f *catalog.Fence, ttl time.Duration) (*catalog.WorkItem, error)
}

func (s *watchedStore) count(err error) {
	if err == nil && s.armed.Load() {
		s.writes.Add(1)
	}
}

func (s *watchedStore) SaveCheckpoint(ctx context.Context, c catalog.Checkpoint) error {
	err := s.Store.SaveCheckpoint(ctx, c)
	s.count(err)
	if err == nil && s.afterCheckpoint != nil {
		s.afterCheckpoint(c)
	}
	return err
}

func (s *watchedStore) RemoveFinalizer(ctx context.Context, k catalog.Key, finalizer string) (*catalog.Resource, error) {
	r, err := s.Store.RemoveFinalizer(ctx, k, finalizer)
	s.count(err)
	if err == nil && s.afterRemoveFinalizer != nil {
		s.afterRemoveFinalizer()
	}
	return r, err
}

func (s *watchedStore) Purge(ctx context.Context, k catalog.Key, opts catalog.PurgeOptions) error {
	err := s.Store.Purge(ctx, k, opts)
	s.count(err)
	return err
}

func (s *watchedStore) Update(ctx context.Context, r *catalog.Resource) (*catalog.Resource, error) {
	out, err := s.Store.Update(ctx, r)
	s.count(err)
	return out, err
}

func (s *watchedStore) DeleteProgress(ctx context.Context, uid string) error {
	err := s.Store.DeleteProgress(ctx, uid)
	s.count(err)
	return err
}

func (s *watchedStore) Renew(ctx context.Context, f *catalog.Fence, ttl time.Duration) (*catalog.WorkItem, error) {
	if s.renew != nil {
		return s.renew(ctx, f, ttl)
	}
	return s.Store.Renew(ctx, f, ttl)
}

// invEnv is a deletion environment on the recorder plugins whose Deleter
// runs through a gate and a watched store.
type invEnv struct {
	*env
	gate  *gate
	store *watchedStore
	del   *deletion.Deleter
}

// newInvEnv wires a Deleter named holder over e's catalog, storage and
// plugins; tweak adjusts its config.
func (e *env) deleter(holder string, hooks deletion.TestHooks, tweak func(*deletion.Config)) *invEnv {
	e.t.Helper()
	ie := &invEnv{env: e, gate: newGate(deletion.HostPlugins(e.host)), store: &watchedStore{Store: e.store}}
	cfg := &deletion.Config{
		Store: ie.store, Blobs: e.blobs, Plugins: ie.gate, Now: e.clock, Holder: holder,
		LeaseTTL: 30 * time.Second, CheckpointEvery: 1,
	}
	if tweak != nil {
		tweak(cfg)
	}
	d, err := deletion.New(cfg)
	require.NoError(e.t, err)
	if hooks.RenewTick == nil {
		hooks.RenewTick = make(chan time.Time) // renewals only when a test says
	}
	deletion.SetTestHooks(d, hooks)
	ie.del = d
	return ie
}

// await waits for ch, failing the test if the run ends first.
func await(t *testing.T, ch <-chan struct{}, done <-chan error) {
	t.Helper()
	select {
	case <-ch:
	case err := <-done:
		t.Fatalf("the run ended early: %v", err)
	}
}

// settledAllBut returns a Settled hook and a channel closed once the
// settler has taken every one of n items except the ordinal skipped.
func settledAllBut(n int, skip int64) (func(int64), <-chan struct{}) {
	seen := map[int64]bool{}
	all := make(chan struct{})
	return func(o int64) {
		if o == skip || seen[o] {
			return
		}
		seen[o] = true
		if len(seen) == n-1 {
			close(all)
		}
	}, all
}

func (e *env) watermark(name string) int64 {
	e.t.Helper()
	r, err := e.store.Get(e.ctx, backup.Key(name))
	require.NoError(e.t, err)
	p, _, err := e.store.LoadProgress(e.ctx, r.UID)
	require.NoError(e.t, err)
	return p.Watermark
}

func (e *env) requireNotPurged(name string) {
	e.t.Helper()
	r, err := e.store.Get(e.ctx, backup.Key(name))
	require.NoError(e.t, err, "the backup record must stay")
	require.Equal(e.t, catalog.PhaseDeleting, r.Phase)
	require.Contains(e.t, r.Finalizers, catalog.FinalizerDeleteActions, "the plugins' finalizer must stay")
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey(name))
	require.NoError(e.t, err, "the tarball must stay")
	_, err = e.store.GetTombstone(e.ctx, backup.Key(name))
	require.ErrorIs(e.t, err, catalog.ErrNotFound)
}

// count returns how many times plugin executed the item key.
func (e *env) count(plugin, key string) int {
	n := 0
	for _, l := range e.lines() {
		if l == plugin+"\t"+key {
			n++
		}
	}
	return n
}

// requireEveryItemReachedEveryPlugin checks the recorder saw each item of
// specs at both catch-all plugins and, for pods, at c-pods.
func (e *env) requireEveryItemReachedEveryPlugin(specs []archivetest.ItemSpec) {
	e.t.Helper()
	got := map[string]bool{}
	for _, l := range e.lines() {
		got[l] = true
	}
	for _, s := range specs {
		require.True(e.t, got[pluginA+"\t"+s.Key()], "%s never reached %s", s.Key(), pluginA)
		require.True(e.t, got[pluginB+"\t"+s.Key()], "%s never reached %s", s.Key(), pluginB)
		if s.Resource == "pods" {
			require.True(e.t, got[pluginC+"\t"+s.Key()], "%s never reached %s", s.Key(), pluginC)
		}
	}
}

// TestWatermarkNeverPassesAnItemInFlight: while one item's ack is held,
// every other item finishes; the persisted checkpoint must still stop at
// that item.
func TestWatermarkNeverPassesAnItemInFlight(t *testing.T) {
	e := newEnv(t)
	const n, slow = 40, 5
	e.addBackup("nightly", items(n), archivetest.Options{}, nil)
	hook, others := settledAllBut(n, slow)
	ie := e.deleter("me", deletion.TestHooks{Settled: hook}, nil)
	h := ie.gate.hold(pluginA, slow)

	done := make(chan error, 1)
	go func() {
		_, err := ie.del.Delete(e.ctx, "nightly", deletion.Options{})
		done <- err
	}()
	await(t, h.arrived, done)
	await(t, others, done)
	require.EqualValues(t, slow, e.watermark("nightly"),
		"the persisted watermark must stop at the item still in flight, with every other item finished")

	close(h.release)
	require.NoError(t, <-done)
	e.requirePurged("nightly")
}

// TestCheckpointWaitsForThePluginsAck: the last plugin has executed an
// item but its ack has not reached the host when the run is interrupted.
// The checkpoint must not count it, and the resume delivers it again.
func TestCheckpointWaitsForThePluginsAck(t *testing.T) {
	e := newEnv(t)
	const n, slow = 30, 7
	specs := items(n)
	e.addBackup("nightly", specs, archivetest.Options{}, nil)
	hook, others := settledAllBut(n, slow)
	ie := e.deleter("me", deletion.TestHooks{Settled: hook}, nil)
	h := ie.gate.hold(pluginB, slow)

	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := ie.del.Delete(ctx, "nightly", deletion.Options{})
		done <- err
	}()
	await(t, h.arrived, done) // b-second executed it (and recorded it); the ack is held
	await(t, others, done)
	key := ie.gate.keyOf(slow)
	require.Equal(t, 1, e.count(pluginB, key))
	cancel() // the crash: the ack never arrives
	require.ErrorContains(t, <-done, "interrupted")
	require.LessOrEqual(t, e.watermark("nightly"), int64(slow), "an unacked item must not be checkpointed")

	rep, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Equal(t, 2, e.count(pluginB, key), "the unacked item is delivered again after the resume")
	e.requireEveryItemReachedEveryPlugin(specs)
}

// TestNoPurgeBeforeTheLastStageFinished: an item the last plugin has not
// finished keeps the record, its finalizer and the tarball, whether the
// plugin is still working on it or failed it.
func TestNoPurgeBeforeTheLastStageFinished(t *testing.T) {
	e := newEnv(t)
	const n, slow = 24, 4
	e.addBackup("nightly", pods(n), archivetest.Options{}, nil) // c-pods is every item's last plugin
	hook, others := settledAllBut(n, slow)
	ie := e.deleter("me", deletion.TestHooks{Settled: hook}, nil)
	h := ie.gate.hold(pluginC, slow)
	done := make(chan error, 1)
	go func() {
		_, err := ie.del.Delete(e.ctx, "nightly", deletion.Options{})
		done <- err
	}()
	await(t, h.arrived, done)
	await(t, others, done)
	e.requireNotPurged("nightly")
	close(h.release)
	require.NoError(t, <-done)
	e.requirePurged("nightly")

	// The last stage fails an item: nothing is purged.
	e.addBackup("weekly", items(n), archivetest.Options{}, nil)
	require.NoError(t, os.WriteFile(filepath.Join(e.blockDir, "item-5.fail-b"), nil, 0o600))
	rep, err := e.del.Delete(e.ctx, "weekly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	require.Equal(t, pluginB, rep.Unsettled[0].Plugin)
	e.requireNotPurged("weekly")
}

// TestLostLeaseStopsTheOldRunAndTheNewOneCompletes: the old run's lease
// expires mid-run (injected clock) and another holder claims the
// deletion. The new run completes; the old one, once its held item comes
// back, writes nothing more and says it lost the lease.
func TestLostLeaseStopsTheOldRunAndTheNewOneCompletes(t *testing.T) {
	e := newEnv(t)
	const n, slow = 30, 3
	specs := items(n)
	e.addBackup("nightly", specs, archivetest.Options{}, nil)
	hook, others := settledAllBut(n, slow)
	old := e.deleter("old-host pid 1", deletion.TestHooks{Settled: hook}, nil)
	h := old.gate.hold(pluginA, slow)
	done := make(chan error, 1)
	go func() {
		_, err := old.del.Delete(e.ctx, "nightly", deletion.Options{})
		done <- err
	}()
	await(t, h.arrived, done)
	await(t, others, done)

	// The old run stalls past its lease; another host takes over.
	e.now = e.now.Add(31 * time.Second)
	old.store.armed.Store(true)
	next := e.deleter("new-host pid 2", deletion.TestHooks{}, nil)
	rep, err := next.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	e.requirePurged("nightly")
	e.requireEveryItemReachedEveryPlugin(specs)

	close(h.release)
	err = <-done
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.Zero(t, old.store.writes.Load(), "the run that lost its lease must write nothing more")
	r, err := e.store.GetTombstone(e.ctx, backup.Key("nightly"))
	require.NoError(t, err)
	_, _, err = e.store.LoadProgress(e.ctx, r.UID)
	require.ErrorIs(t, err, catalog.ErrNotFound, "no checkpoint written back after the purge")
}

// TestTwoRunsInOneProcessCannotBothPassTheFence: a second run of the same
// process (same holder name) claims the deletion after the first one's
// last checkpoint. The first run must not remove the finalizer.
func TestTwoRunsInOneProcessCannotBothPassTheFence(t *testing.T) {
	e := newEnv(t)
	const n = 12
	e.addBackup("nightly", items(n), archivetest.Options{}, nil)
	first := e.deleter("me", deletion.TestHooks{}, nil)
	second := e.deleter("me", deletion.TestHooks{}, nil)
	// The settler saves the last item's checkpoint, then the final one:
	// the second claim comes right after that, before the finalizer.
	var complete atomic.Int32
	var claimed sync.Once
	first.store.afterCheckpoint = func(c catalog.Checkpoint) {
		if c.Progress.Watermark == n && complete.Add(1) == 2 {
			claimed.Do(func() {
				_, err := e.store.ClaimKey(e.ctx, deletion.Queue, c.Progress.UID, "me", time.Minute)
				require.NoError(t, err)
				first.store.armed.Store(true)
			})
		}
	}
	_, err := first.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.Zero(t, first.store.writes.Load(), "the fenced-off run wrote after the second claim")
	e.requireNotPurged("nightly")

	// The claim above is not running anything; once it expires, a run
	// finishes the deletion.
	e.now = e.now.Add(2 * time.Minute)
	rep, err := second.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
}

// TestTarballIsNotDeletedWithoutTheFence: the lease is lost between the
// finalizer's removal and the tarball's deletion. The tarball stays.
func TestTarballIsNotDeletedWithoutTheFence(t *testing.T) {
	e := newEnv(t)
	e.addBackup("nightly", items(9), archivetest.Options{}, nil)
	ie := e.deleter("me", deletion.TestHooks{}, nil)
	ie.store.afterRemoveFinalizer = func() {
		r, err := e.store.Get(e.ctx, backup.Key("nightly"))
		require.NoError(t, err)
		if len(r.Finalizers) > 0 {
			// Not the last finalizer (the cascade's goes after the
			// plugins'): a fenced catalog write still follows. After the
			// last one, only the fence check protects the tarball.
			return
		}
		e.now = e.now.Add(time.Minute)
		_, err = e.store.ClaimKey(e.ctx, deletion.Queue, r.UID, "someone else", time.Minute)
		require.NoError(t, err)
	}
	_, err := ie.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey("nightly"))
	require.NoError(t, err, "the tarball must not be deleted by a run that lost its lease")
	r, err := e.store.Get(e.ctx, backup.Key("nightly"))
	require.NoError(t, err, "nor the record purged")
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
}

// TestTransientRenewalErrorIsRetried: renewals that fail for a transient
// reason are retried within the TTL and the run completes; once the lease
// has expired, a failing renewal stops the run.
func TestTransientRenewalErrorIsRetried(t *testing.T) {
	e := newEnv(t)
	const n, slow = 12, 2
	e.addBackup("nightly", items(n), archivetest.Options{}, nil)
	tick := make(chan time.Time)
	ie := e.deleter("me", deletion.TestHooks{RenewTick: tick}, nil)
	// Only the renewal loop's calls are reported: the test expects one
	// after each tick (the purge's fence check also renews).
	calls := make(chan error)
	var fail atomic.Int32
	var expect atomic.Bool
	fail.Store(2)
	ie.store.renew = func(ctx context.Context, f *catalog.Fence, ttl time.Duration) (*catalog.WorkItem, error) {
		var err error
		var w *catalog.WorkItem
		if fail.Add(-1) >= 0 {
			err = errors.New("connection reset by peer")
		} else {
			w, err = e.store.Renew(ctx, f, ttl)
		}
		if expect.CompareAndSwap(true, false) {
			calls <- err
		}
		return w, err
	}
	h := ie.gate.hold(pluginA, slow)
	done := make(chan error, 1)
	go func() {
		_, err := ie.del.Delete(e.ctx, "nightly", deletion.Options{})
		done <- err
	}()
	await(t, h.arrived, done)
	for i, want := range []bool{false, false, true} {
		expect.Store(true)
		tick <- time.Now()
		err := <-calls
		require.Equal(t, want, err == nil, "renewal %d: %v", i, err)
	}
	close(h.release)
	require.NoError(t, <-done)
	e.requirePurged("nightly")

	// Failing past the expiry: the run stops, having lost the lease.
	e.addBackup("weekly", items(n), archivetest.Options{}, nil)
	fail.Store(1 << 20)
	h = ie.gate.hold(pluginA, slow)
	go func() {
		_, err := ie.del.Delete(e.ctx, "weekly", deletion.Options{})
		done <- err
	}()
	await(t, h.arrived, done)
	e.now = e.now.Add(time.Minute)
	expect.Store(true)
	tick <- time.Now()
	t.Logf("renewal after expiry: %v", <-calls) // the run's own error is checked below
	err := <-done
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.ErrorContains(t, err, "lost the deletion lease")
	e.requireNotPurged("weekly")
}

// TestWindowHoldsTheFeederBackBehindASlowItem: with a window of 8, a slow
// item at ordinal 2 stops the feeder at ordinal 10, and nothing past the
// window is sent to any plugin until the slow item is done.
func TestWindowHoldsTheFeederBackBehindASlowItem(t *testing.T) {
	e := newEnv(t)
	const n, slow, window = 60, 2, 8
	specs := items(n)
	e.addBackup("nightly", specs, archivetest.Options{}, nil)
	type wait struct{ ordinal, watermark int64 }
	waits := make(chan wait, 4*n) // the feeder waits at most once per watermark move, and once more
	// With no bound, every other item would settle while the slow one is
	// held: that ends the wait below with a failure instead of a hang.
	hook, others := settledAllBut(n, slow)
	ie := e.deleter("me", deletion.TestHooks{Settled: hook, FeederWaits: func(o, wm int64) { waits <- wait{o, wm} }},
		func(c *deletion.Config) { c.ReorderWindow = window })
	h := ie.gate.hold(pluginA, slow)
	done := make(chan error, 1)
	go func() {
		_, err := ie.del.Delete(e.ctx, "nightly", deletion.Options{})
		done <- err
	}()
	await(t, h.arrived, done)
	var w wait
	for w.watermark != slow {
		select {
		case w = <-waits:
		case <-others:
			close(h.release)
			t.Fatalf("every item but the slow one settled: the feeder ran past the window")
		}
	}
	require.EqualValues(t, slow+window, w.ordinal, "the feeder waits at the window's edge")
	ie.gate.mu.Lock()
	for o := range ie.gate.sent {
		require.Less(t, o, int64(slow+window), "ordinal %d was sent past the window", o)
	}
	ie.gate.mu.Unlock()
	close(h.release)
	require.NoError(t, <-done)
	e.requirePurged("nightly")
	e.requireEveryItemReachedEveryPlugin(specs)
}

// pods returns n pods: every item's last plugin is c-pods.
func pods(n int) []archivetest.ItemSpec {
	out := make([]archivetest.ItemSpec, n)
	for i := range out {
		out[i] = archivetest.ItemSpec{Resource: "pods", Kind: "Pod", Namespace: "ns-a", Name: fmt.Sprintf("pod-%d", i), Size: 300}
	}
	return out
}

// TestRunWorkOnAStaleItemChangesNothing: a work item whose backup is not
// Deleting (here Active) is removed with a clear error; the backup, its
// tarball and the plugins are untouched.
func TestRunWorkOnAStaleItemChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.addBackup("nightly", items(6), archivetest.Options{}, nil)
	r, err := e.store.Get(e.ctx, backup.Key("nightly"))
	require.NoError(t, err)
	_, err = e.store.Enqueue(e.ctx, catalog.WorkItem{Queue: deletion.Queue, Key: r.UID})
	require.NoError(t, err)
	ws, err := e.store.Claim(e.ctx, deletion.Queue, "daemon", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, ws, 1)

	_, err = e.del.RunWork(e.ctx, ws[0], deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrStaleWork)
	require.ErrorContains(t, err, "is Active, not Deleting")
	_, err = e.store.GetWork(e.ctx, deletion.Queue, r.UID)
	require.ErrorIs(t, err, catalog.ErrNotFound, "the stale work item is removed")
	got, err := e.store.Get(e.ctx, backup.Key("nightly"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, got.Phase)
	require.Equal(t, r.ResourceVersion, got.ResourceVersion, "the backup is untouched")
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey("nightly"))
	require.NoError(t, err)
	require.Empty(t, e.lines(), "no plugin ran")
}

// TestPurgeRefusesABackupThatIsNotTheDeletingOne: between the finalizers'
// removal and the purge, the backup is purged by someone else and a new
// backup of the same name registered (same storage key). The old run must
// not delete the new backup's tarball.
func TestPurgeRefusesABackupThatIsNotTheDeletingOne(t *testing.T) {
	e := newEnv(t)
	e.addBackup("nightly", items(6), archivetest.Options{}, nil)
	ie := e.deleter("me", deletion.TestHooks{}, nil)
	calls := 0
	ie.store.afterRemoveFinalizer = func() {
		// The second removal is the cascade's (the backup has no
		// dependents): the last write before the purge.
		if calls++; calls != 2 {
			return
		}
		require.NoError(t, e.store.Purge(catalog.WithActor(e.ctx, "someone else"), backup.Key("nightly"), catalog.PurgeOptions{}))
		require.NoError(t, e.blobs.Delete(e.ctx, backup.StorageKey("nightly")))
		e.addBackup("nightly", items(3), archivetest.Options{}, nil)
	}
	_, err := ie.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.ErrorContains(t, err, "refusing to purge it")
	r, err := e.store.Get(e.ctx, backup.Key("nightly"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey("nightly"))
	require.NoError(t, err, "the new backup's tarball must stay")
}
