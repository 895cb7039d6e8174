package leader_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/catalog"
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
