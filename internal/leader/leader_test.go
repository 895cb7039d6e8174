package leader_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/leader"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openStore opens a real SQLite catalog; two calls on one path are two
// independent stores on one file, as two processes would be.
func openStore(t *testing.T, path string) catalog.Store {
	t.Helper()
	st, err := drivers.Open(context.Background(), "sqlite://"+path, &catalog.Config{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// journal records, in order, when each replica's leader work starts and
// stops.
type journal struct {
	mu     sync.Mutex
	events []string
	change chan struct{}
}

func newJournal() *journal { return &journal{change: make(chan struct{}, 100)} }

func (j *journal) add(ev string) {
	j.mu.Lock()
	j.events = append(j.events, ev)
	j.mu.Unlock()
	j.change <- struct{}{}
}

func (j *journal) snapshot() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.events...)
}

// waitFor waits for the journal to reach n events.
func (j *journal) waitFor(t *testing.T, n int, timeout time.Duration) []string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if ev := j.snapshot(); len(ev) >= n {
			return ev
		}
		select {
		case <-j.change:
		case <-deadline:
			t.Fatalf("journal stuck at %v, want %d events", j.snapshot(), n)
		}
	}
}

type replica struct {
	el     *leader.Elector
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, st catalog.Store, name string, ttl time.Duration, wake <-chan struct{}, j *journal) *replica {
	t.Helper()
	el, err := leader.New(&leader.Config{Store: st, Holder: name, TTL: ttl, Wake: wake})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(catalog.WithActor(context.Background(), name))
	r := &replica{el: el, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = el.Run(ctx, func(lctx context.Context) {
			j.add(name + " start")
			<-lctx.Done()
			j.add(name + " stop")
		})
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// TestGracefulStopHandsOverAtOnce: with a lease far longer than the test,
// the follower takes over only because the leader resigned and the
// wake-up reached it; and the old leader's work stopped before the new
// one's started.
func TestGracefulStopHandsOverAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lethe.db")
	st := openStore(t, path)
	w, err := st.Wakeups(context.Background())
	require.NoError(t, err)
	defer w.Close()
	wake := make(chan struct{}, 1)
	go func() {
		for range w.C() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	j := newJournal()
	a := start(t, st, "a", time.Hour, nil, j)
	require.Equal(t, []string{"a start"}, j.waitFor(t, 1, 10*time.Second))
	start(t, st, "b", time.Hour, wake, j)
	require.True(t, a.el.Leading())
	a.cancel()
	<-a.done
	got := j.waitFor(t, 3, 30*time.Second) // without the hand-over: an hour
	require.Equal(t, []string{"a start", "a stop", "b start"}, got)
	l, err := st.GetLeader(context.Background(), leader.NameDefault)
	require.NoError(t, err)
	require.Equal(t, "b", l.Holder)
	require.Equal(t, int64(2), l.Term)
}

// TestKilledLeaderIsReplacedAfterTheTTL: a leader that stops renewing
// (its catalog gone, as for a killed process) stops its own work when its
// lease lapses, and only then does another replica take over.
func TestKilledLeaderIsReplacedAfterTheTTL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lethe.db")
	stA := openStore(t, path)
	stB := openStore(t, path)
	j := newJournal()
	fa := &failing{Store: stA}
	start(t, fa, "a", 600*time.Millisecond, nil, j)
	require.Equal(t, []string{"a start"}, j.waitFor(t, 1, 10*time.Second))
	start(t, stB, "b", 600*time.Millisecond, nil, j)
	fa.mu.Lock()
	fa.off = true
	fa.mu.Unlock()
	got := j.waitFor(t, 3, 30*time.Second)
	require.Equal(t, []string{"a start", "a stop", "b start"}, got, "the old leader's work stops before the new one's starts")
	l, err := stB.GetLeader(context.Background(), leader.NameDefault)
	require.NoError(t, err)
	require.Equal(t, "b", l.Holder)
	require.Equal(t, int64(2), l.Term)
	entries, err := stB.ListAudit(context.Background(), catalog.AuditFilter{Kind: catalog.AuditKindLeader})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Contains(t, string(entries[1].Details), `"tookOver":true`)
}

// TestOneLeaderAmongMany: five replicas on one file, one leads.
func TestOneLeaderAmongMany(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lethe.db")
	j := newJournal()
	var rs []*replica
	for _, n := range []string{"r1", "r2", "r3", "r4", "r5"} {
		rs = append(rs, start(t, openStore(t, path), n, time.Hour, nil, j))
	}
	j.waitFor(t, 1, 10*time.Second)
	var leading int
	for range 20 { // a while: nobody else starts
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range rs {
		if r.el.Leading() {
			leading++
		}
	}
	require.Equal(t, 1, leading)
	require.Len(t, j.snapshot(), 1)
}

// failing is a store whose leader calls fail once cut: the replica can
// no longer reach the catalog.
type failing struct {
	catalog.Store
	mu  sync.Mutex
	off bool
}

func (f *failing) AcquireLeader(ctx context.Context, name, holder string, ttl time.Duration) (*catalog.LeaderLease, error) {
	f.mu.Lock()
	off := f.off
	f.mu.Unlock()
	if off {
		return nil, context.DeadlineExceeded
	}
	return f.Store.AcquireLeader(ctx, name, holder, ttl)
}

// gatedRenewals passes a replica's first AcquireLeader (its acquisition)
// and holds every later one (its renewals) until the test hands out a
// token, so the test decides when the leader learns what the catalog
// says. It notes any renewal asked after one that named another holder
// while the leader's work still runs: a deposed leader keeping on.
type gatedRenewals struct {
	catalog.Store
	tokens  chan struct{}
	working *atomic.Bool

	mu        sync.Mutex
	calls     int
	open      bool
	deposed   bool   // a renewal answered with another holder
	violation string // what the deposed leader did next
}

func (g *gatedRenewals) AcquireLeader(ctx context.Context, name, holder string, ttl time.Duration) (*catalog.LeaderLease, error) {
	g.mu.Lock()
	g.calls++
	n, open := g.calls, g.open
	if g.deposed && g.working.Load() && g.violation == "" {
		g.violation = "the deposed leader asked to renew again while its work still ran"
	}
	g.mu.Unlock()
	if n > 1 && !open {
		select {
		case <-g.tokens:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l, err := g.Store.AcquireLeader(ctx, name, holder, ttl)
	if err == nil && l.Holder != holder {
		g.mu.Lock()
		g.deposed = true
		g.mu.Unlock()
	}
	return l, err
}

func (g *gatedRenewals) openGate() {
	g.mu.Lock()
	g.open = true
	g.mu.Unlock()
	close(g.tokens)
}

func (g *gatedRenewals) violated() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.violation
}

// TestRenewalNamingAnotherHolderStopsTheLeaderAtOnce: the leader's own
// clock never moves, so its lease never lapses by it; another replica
// takes the lease over (the catalog's clock moved on, as for a leader
// paused past its lease). From then on the old term's writes are refused
// by the catalog, and the first renewal that names the other holder stops
// the leader's work at once: no further renewal, no further write.
func TestRenewalNamingAnotherHolderStopsTheLeaderAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lethe.db")
	clock := catalogtest.NewClock(catalogtest.Epoch)
	st, err := drivers.Open(context.Background(), "sqlite://"+path, &catalog.Config{Now: clock.Now, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	defer st.Close()
	var working atomic.Bool
	g := &gatedRenewals{Store: st, tokens: make(chan struct{}), working: &working}
	frozen := func() time.Time { return catalogtest.Epoch }
	el, err := leader.New(&leader.Config{Store: g, Holder: "a", TTL: 300 * time.Millisecond, Now: frozen})
	require.NoError(t, err)

	// The leader's work writes when the test asks it to.
	writes := make(chan chan error)
	stopped := make(chan struct{})
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(catalog.WithActor(context.Background(), "a"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = el.Run(ctx, func(lctx context.Context) {
			working.Store(true)
			close(started)
			defer close(stopped)
			defer working.Store(false)
			for n := 0; ; n++ {
				select {
				case <-lctx.Done():
					return
				case reply := <-writes:
					_, err := st.Enqueue(lctx, catalog.WorkItem{Queue: "leader-writes", Key: fmt.Sprintf("w%d", n)})
					reply <- err
				}
			}
		})
	}()
	defer func() { cancel(); <-done }()
	write := func() error {
		reply := make(chan error)
		select {
		case writes <- reply:
			return <-reply
		case <-stopped:
			return errors.New("the work has stopped")
		}
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("a never led")
	}
	require.NoError(t, write(), "the live term writes")

	// b takes the lease over: term 2. a does not know yet (its renewal
	// waits at the gate), but the catalog refuses its term's writes.
	clock.Advance(time.Hour)
	b, err := st.AcquireLeader(context.Background(), leader.NameDefault, "b", time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Term)
	err = write()
	require.ErrorIs(t, err, catalog.ErrStaleTerm, "a write of the deposed term")
	require.True(t, el.Leading(), "a has not been told yet")

	// The renewal names b: a stops its work at once.
	g.tokens <- struct{}{}
	deadline := time.After(10 * time.Second)
	for waiting := true; waiting; {
		select {
		case <-stopped:
			waiting = false
		case <-time.After(5 * time.Millisecond):
			require.Empty(t, g.violated(), "the leader kept on after a renewal named another holder")
		case <-deadline:
			t.Fatal("the leader kept on after a renewal named another holder: its work still runs")
		}
	}
	require.Empty(t, g.violated())
	g.openGate()
	require.Eventually(t, func() bool { return !el.Leading() }, 10*time.Second, 5*time.Millisecond)
	items, err := st.ListWork(context.Background(), "leader-writes")
	require.NoError(t, err)
	require.Len(t, items, 1, "only the write of the live term is in the catalog")
	require.Equal(t, "w0", items[0].Key)
}
