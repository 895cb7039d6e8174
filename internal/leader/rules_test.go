package leader_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/leader"
)

// scripted passes AcquireLeader to a real catalog and lets the test
// rewrite the answer to one call (by its number, from 1): the catalog
// answers what the rule needs, on the call the test chooses.
type scripted struct {
	catalog.Store
	mu      sync.Mutex
	calls   int
	rewrite map[int]func(*catalog.LeaderLease)
}

func (s *scripted) AcquireLeader(ctx context.Context, name, holder string, ttl time.Duration) (*catalog.LeaderLease, error) {
	l, err := s.Store.AcquireLeader(ctx, name, holder, ttl)
	s.mu.Lock()
	s.calls++
	f := s.rewrite[s.calls]
	s.mu.Unlock()
	if err == nil && f != nil {
		c := *l
		f(&c)
		l = &c
	}
	return l, err
}

// frozenStore opens a real SQLite catalog whose clock, like the
// elector's in these tests, stays at catalogtest.Epoch.
func frozenStore(t *testing.T) catalog.Store {
	t.Helper()
	st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "lethe.db"),
		&catalog.Config{Now: catalogtest.NewClock(catalogtest.Epoch).Now, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// runCounting runs el until the test ends, counting how often the
// leader's work starts and stops; ended is closed if Run returns.
func runCounting(t *testing.T, el *leader.Elector) (j *journal, ended chan struct{}) {
	t.Helper()
	j = newJournal()
	ended = make(chan struct{})
	ctx, cancel := context.WithCancel(catalog.WithActor(context.Background(), "a"))
	go func() {
		defer close(ended)
		_ = el.Run(ctx, func(lctx context.Context) {
			j.add("start")
			<-lctx.Done()
			j.add("stop")
		})
	}()
	t.Cleanup(func() { cancel(); <-ended })
	return j, ended
}

// TestRenewalInAnotherTermDeposesTheLeader: a renewal that names this
// replica's own holder name but another term (another process of the
// same name took the lease over) stops the leader's work at once. The
// leader's own clock never moves, so only the term can stop it.
func TestRenewalInAnotherTermDeposesTheLeader(t *testing.T) {
	st := frozenStore(t)
	s := &scripted{Store: st, rewrite: map[int]func(*catalog.LeaderLease){
		2: func(l *catalog.LeaderLease) { l.Term++ },
	}}
	frozen := func() time.Time { return catalogtest.Epoch }
	el, err := leader.New(&leader.Config{Store: s, Holder: "a", TTL: 300 * time.Millisecond, Now: frozen})
	require.NoError(t, err)
	j, _ := runCounting(t, el)
	require.Equal(t, []string{"start", "stop"}, j.waitFor(t, 2, 10*time.Second)[:2],
		"the leader kept on after a renewal in another term")
}

// TestADeposedReplicaCompetesAgain: a replica whose renewal named another
// holder stops leading but stays a candidate: Run goes on, and it leads
// again once the catalog gives it the lease.
func TestADeposedReplicaCompetesAgain(t *testing.T) {
	st := frozenStore(t)
	s := &scripted{Store: st, rewrite: map[int]func(*catalog.LeaderLease){
		2: func(l *catalog.LeaderLease) { l.Holder, l.Term = "b", l.Term+1 },
	}}
	frozen := func() time.Time { return catalogtest.Epoch }
	el, err := leader.New(&leader.Config{Store: s, Holder: "a", TTL: 300 * time.Millisecond, Now: frozen})
	require.NoError(t, err)
	j, ended := runCounting(t, el)
	require.Equal(t, []string{"start", "stop", "start"}, j.waitFor(t, 3, 10*time.Second))
	select {
	case <-ended:
		t.Fatal("Run returned after this replica was deposed: it no longer competes")
	default:
	}
	require.True(t, el.Leading())
}

// TestConfigNeedsAStoreAndAHolderAndATTLOfAtLeast300ms: New refuses a
// configuration without a holder name (two unnamed replicas would both
// hold the lease) or with a TTL too short to renew in time.
func TestConfigNeedsAStoreAndAHolderAndATTLOfAtLeast300ms(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lethe.db"))
	_, err := leader.New(&leader.Config{Store: st})
	require.ErrorContains(t, err, "Config.Holder")
	_, err = leader.New(&leader.Config{Holder: "a"})
	require.ErrorContains(t, err, "Config.Store")
	_, err = leader.New(&leader.Config{Store: st, Holder: "a", TTL: 299 * time.Millisecond})
	require.ErrorContains(t, err, "at least 300ms")
	_, err = leader.New(&leader.Config{Store: st, Holder: "a", TTL: 300 * time.Millisecond})
	require.NoError(t, err)
}

// waits records every wait an elector asks for, and makes each a
// millisecond long so the test runs at once.
type waits struct {
	mu   sync.Mutex
	asks []time.Duration
}

func (w *waits) timer(d time.Duration) *time.Timer {
	w.mu.Lock()
	w.asks = append(w.asks, d)
	w.mu.Unlock()
	return time.NewTimer(time.Millisecond)
}

// first returns the first n waits, once there are n.
func (w *waits) first(t *testing.T, n int) []time.Duration {
	t.Helper()
	var got []time.Duration
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		got = append([]time.Duration(nil), w.asks...)
		return len(got) >= n
	}, 10*time.Second, time.Millisecond)
	return got[:n]
}

// failingOnce answers AcquireLeader from the catalog, except call n,
// which fails as an unreachable catalog does.
type failingOnce struct {
	catalog.Store
	mu    sync.Mutex
	calls int
	n     int
}

func (f *failingOnce) AcquireLeader(ctx context.Context, name, holder string, ttl time.Duration) (*catalog.LeaderLease, error) {
	f.mu.Lock()
	f.calls++
	fail := f.calls == f.n
	f.mu.Unlock()
	if fail {
		return nil, context.DeadlineExceeded
	}
	return f.Store.AcquireLeader(ctx, name, holder, ttl)
}

// TestTheLeaderRenewsEveryThirdOfItsTTLAndRetriesAFailedRenewalSooner:
// with its own clock stopped (so its lease never lapses by it), a leader
// with a TTL of 300ms waits 100ms (a third) before each renewal, and
// 15ms (a twentieth) before retrying a renewal that failed.
func TestTheLeaderRenewsEveryThirdOfItsTTLAndRetriesAFailedRenewalSooner(t *testing.T) {
	w := &waits{}
	frozen := func() time.Time { return catalogtest.Epoch }
	el, err := leader.New(&leader.Config{Store: &failingOnce{Store: frozenStore(t), n: 3}, Holder: "a",
		TTL: 300 * time.Millisecond, Now: frozen, NewTimer: w.timer})
	require.NoError(t, err)
	runCounting(t, el)
	// Calls: 1 acquires; 2 renews after the first wait; 3 fails after the
	// second; 4 retries after the third.
	require.Equal(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 15 * time.Millisecond, 100 * time.Millisecond}, w.first(t, 4))
}

// TestAFollowerLooksAgainEveryThirdOfTheTTL: a replica that finds the
// lease held by another, far from lapsing, looks again a third of the TTL
// later (the safety net when no wake-up comes), not when that lease
// would lapse.
func TestAFollowerLooksAgainEveryThirdOfTheTTL(t *testing.T) {
	st := frozenStore(t)
	_, err := st.AcquireLeader(context.Background(), leader.NameDefault, "b", time.Hour)
	require.NoError(t, err)
	w := &waits{}
	frozen := func() time.Time { return catalogtest.Epoch }
	el, err := leader.New(&leader.Config{Store: st, Holder: "a", TTL: 300 * time.Millisecond, Now: frozen, NewTimer: w.timer})
	require.NoError(t, err)
	runCounting(t, el)
	require.Equal(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, w.first(t, 2))
	require.False(t, el.Leading())
}

// slowRenewals answers AcquireLeader from the catalog, each renewal
// taking took by the elector's clock (a catalog far away).
type slowRenewals struct {
	catalog.Store
	clock *catalogtest.Clock
	took  time.Duration
}

func (s *slowRenewals) AcquireLeader(ctx context.Context, name, holder string, ttl time.Duration) (*catalog.LeaderLease, error) {
	l, err := s.Store.AcquireLeader(ctx, name, holder, ttl)
	s.clock.Advance(s.took)
	return l, err
}

// TestSlowRenewalsDoNotDriftPastTheDeadline: each renewal takes 130 ms of
// a 300 ms TTL (renewed every 100 ms, given up 225 ms after the last
// renewal began). Renewals are due every third of the TTL from the start
// of the previous one, so the leader keeps leading; timed from the end of
// each, the next would begin 230 ms after the last began, past the
// deadline, and the leader would step down at its first renewal.
func TestSlowRenewalsDoNotDriftPastTheDeadline(t *testing.T) {
	clock := catalogtest.NewClock(catalogtest.Epoch)
	cat, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "lethe.db"),
		&catalog.Config{Now: clock.Now, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cat.Close() })
	st := &slowRenewals{Store: cat, clock: clock, took: 130 * time.Millisecond}
	el, err := leader.New(&leader.Config{Store: st, Holder: "a", TTL: 300 * time.Millisecond, Now: clock.Now,
		NewTimer: func(d time.Duration) *time.Timer {
			clock.Advance(d)
			return time.NewTimer(time.Millisecond)
		}})
	require.NoError(t, err)
	j, _ := runCounting(t, el)
	j.waitFor(t, 1, 10*time.Second)
	began := clock.Now()
	require.Eventually(t, func() bool { return clock.Now().Sub(began) > 3*time.Second }, 10*time.Second, time.Millisecond,
		"the renewals go on")
	require.Equal(t, []string{"start"}, j.snapshot(), "the leader stepped down while every renewal succeeded")
}
