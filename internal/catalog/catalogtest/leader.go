package catalogtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

func testLeaderLease(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const name = "server"
	ttl := 10 * time.Second
	_, err := f.s.GetLeader(f.ctx, name)
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = f.s.AcquireLeader(f.ctx, "", "a", ttl)
	require.ErrorIs(t, err, catalog.ErrInvalid)
	_, err = f.s.AcquireLeader(f.ctx, name, "a", 0)
	require.ErrorIs(t, err, catalog.ErrInvalid)

	// A free lease is taken: term 1.
	l, err := f.s.AcquireLeader(f.ctx, name, "a", ttl)
	require.NoError(t, err)
	assert.True(t, l.HeldBy("a", Epoch))
	assert.Equal(t, int64(1), l.Term)
	assert.False(t, l.TookOver)
	assert.True(t, l.ExpiresAt.Equal(Epoch.Add(ttl)))

	// Another holder is refused while it is live; the holder renews.
	f.clock.Advance(4 * time.Second)
	other, err := f.s.AcquireLeader(f.ctx, name, "b", ttl)
	require.NoError(t, err)
	assert.False(t, other.HeldBy("b", f.clock.Now()))
	assert.Equal(t, "a", other.Holder)
	renewed, err := f.s.AcquireLeader(f.ctx, name, "a", ttl)
	require.NoError(t, err)
	assert.Equal(t, int64(1), renewed.Term, "renewal keeps the term")
	assert.True(t, renewed.ExpiresAt.Equal(Epoch.Add(4*time.Second+ttl)))
	assert.True(t, renewed.AcquiredAt.Equal(Epoch))

	// Expired: taken over, term 2, TookOver.
	f.clock.Advance(ttl)
	got, err := f.s.AcquireLeader(f.ctx, name, "b", ttl)
	require.NoError(t, err)
	assert.True(t, got.HeldBy("b", f.clock.Now()))
	assert.Equal(t, int64(2), got.Term)
	assert.True(t, got.TookOver)
	// The old holder cannot renew it, nor resign it.
	back, err := f.s.AcquireLeader(f.ctx, name, "a", ttl)
	require.NoError(t, err)
	assert.Equal(t, "b", back.Holder)
	require.NoError(t, f.s.ResignLeader(f.ctx, name, "a"))
	cur, err := f.s.GetLeader(f.ctx, name)
	require.NoError(t, err)
	assert.Equal(t, "b", cur.Holder)

	// A resignation frees it at once: the next holder does not wait.
	require.NoError(t, f.s.ResignLeader(f.ctx, name, "b"))
	cur, err = f.s.GetLeader(f.ctx, name)
	require.NoError(t, err)
	assert.Empty(t, cur.Holder)
	assert.Equal(t, int64(2), cur.Term)
	c, err := f.s.AcquireLeader(f.ctx, name, "c", ttl)
	require.NoError(t, err)
	assert.True(t, c.HeldBy("c", f.clock.Now()))
	assert.Equal(t, int64(3), c.Term)
	assert.False(t, c.TookOver, "taking a resigned lease is no takeover")

	// Leases are independent by name.
	x, err := f.s.AcquireLeader(f.ctx, "other", "a", ttl)
	require.NoError(t, err)
	assert.True(t, x.HeldBy("a", f.clock.Now()))

	// Every term and resignation is audited, in order.
	audit, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: catalog.AuditKindLeader, Name: name})
	require.NoError(t, err)
	var seq []string
	for _, e := range audit {
		var d struct {
			Holder string `json:"holder"`
			Term   int64  `json:"term"`
		}
		require.NoError(t, json.Unmarshal(e.Details, &d))
		assert.Equal(t, "tester", e.Actor)
		seq = append(seq, fmt.Sprintf("%s %s %d", e.Action, d.Holder, d.Term))
	}
	assert.Equal(t, []string{
		"leader-elected a 1", "leader-elected b 2", "leader-resigned b 2", "leader-elected c 3",
	}, seq)
}

// testLeaderLeaseRace: many holders at once, one term, one leader.
func testLeaderLeaseRace(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const n = 8
	var wg sync.WaitGroup
	leaders := make(chan string, n)
	for i := range n {
		holder := fmt.Sprintf("h%d", i)
		wg.Go(func() {
			l, err := f.s.AcquireLeader(f.ctx, "race", holder, time.Minute)
			if !assert.NoError(t, err) {
				return
			}
			if l.HeldBy(holder, f.clock.Now()) {
				leaders <- holder
			}
		})
	}
	wg.Wait()
	close(leaders)
	var got []string
	for h := range leaders {
		got = append(got, h)
	}
	require.Len(t, got, 1, "exactly one holder leads")
	l, err := f.s.GetLeader(f.ctx, "race")
	require.NoError(t, err)
	assert.Equal(t, int64(1), l.Term)
	assert.Equal(t, got[0], l.Holder)
}

// testWakeups: Enqueue, a due Release and ResignLeader wake subscribers;
// a Release into the future does not.
func testWakeups(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	w, err := f.s.Wakeups(f.ctx)
	require.NoError(t, err)
	defer w.Close()
	next := func() string {
		t.Helper()
		select {
		case topic := <-w.C():
			return topic
		case <-time.After(30 * time.Second):
			t.Fatal("no wake-up")
			return ""
		}
	}
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q1", Key: "a"})
	require.NoError(t, err)
	require.Equal(t, "q1", drainTo(t, next, "q1"))
	// An item enqueued for later wakes nobody, nor does a release into
	// the future (the sleeper's timer covers both); a due release does.
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "later", Key: "a", RunAt: Epoch.Add(time.Hour)})
	require.NoError(t, err)
	got, err := f.s.ClaimKey(f.ctx, "later", "a", "h", time.Minute)
	require.NoError(t, err)
	require.NoError(t, f.s.Release(f.ctx, got.Fence(), Epoch.Add(time.Hour), ""))
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q2", Key: "b"})
	require.NoError(t, err)
	for topic := next(); topic != "q2"; topic = next() {
		require.NotEqual(t, "later", topic, "work not due woke a subscriber")
	}
	again, err := f.s.ClaimKey(f.ctx, "later", "a", "h", time.Minute)
	require.NoError(t, err)
	require.NoError(t, f.s.Release(f.ctx, again.Fence(), time.Time{}, ""))
	require.Equal(t, "later", drainTo(t, next, "later"))
	_, err = f.s.AcquireLeader(f.ctx, "server", "h", time.Minute)
	require.NoError(t, err)
	require.NoError(t, f.s.ResignLeader(f.ctx, "server", "h"))
	require.Equal(t, catalog.WakeTopicLeaderPrefix+"server", drainTo(t, next, catalog.WakeTopicLeaderPrefix+"server"))
	require.NoError(t, w.Close())
	for range w.C() { // buffered hints, then closed
	}
}

// drainTo skips repeats of earlier hints (PostgreSQL delivers a hint both
// in-process and through NOTIFY) until want arrives.
func drainTo(t *testing.T, next func() string, want string) string {
	t.Helper()
	for range 8 {
		if got := next(); got == want {
			return got
		}
	}
	t.Fatalf("wake-up %q never came", want)
	return ""
}

func testNextAvailable(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	_, ok, err := f.s.NextAvailable(f.ctx, "q")
	require.NoError(t, err)
	require.False(t, ok)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q", Key: "later", RunAt: Epoch.Add(time.Hour)})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q", Key: "soon", RunAt: Epoch.Add(time.Minute)})
	require.NoError(t, err)
	at, ok, err := f.s.NextAvailable(f.ctx, "q")
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, at.Equal(Epoch.Add(time.Minute)), "%s", at)
	// A leased item is next available when its lease expires.
	f.clock.Advance(time.Minute)
	got, err := f.s.Claim(f.ctx, "q", "h", 30*time.Second, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	at, _, err = f.s.NextAvailable(f.ctx, "q")
	require.NoError(t, err)
	assert.True(t, at.Equal(Epoch.Add(time.Minute+30*time.Second)), "%s", at)
}

func testCounts(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	for _, n := range []string{"a", "b", "c"} {
		f.create(t, res("Backup", "", n, nil))
	}
	f.create(t, res("Other", "", "x", nil))
	_, err := f.s.Delete(f.ctx, key("Backup", "", "c"), catalog.DeleteOptions{})
	require.NoError(t, err)
	kinds, err := f.s.Kinds(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"Backup", "Other"}, kinds, "every kind held, once each, sorted")
	got, err := f.s.CountByPhase(f.ctx, "Backup")
	require.NoError(t, err)
	assert.Equal(t, map[catalog.Phase]int64{catalog.PhaseActive: 2, catalog.PhaseDeleting: 1}, got)

	for _, k := range []string{"due", "leased", "retried"} {
		_, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q", Key: k})
		require.NoError(t, err)
	}
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q", Key: "later", RunAt: Epoch.Add(time.Hour)})
	require.NoError(t, err)
	_, err = f.s.ClaimKey(f.ctx, "q", "leased", "h", time.Minute)
	require.NoError(t, err)
	r, err := f.s.ClaimKey(f.ctx, "q", "retried", "h", time.Minute)
	require.NoError(t, err)
	require.NoError(t, f.s.Release(f.ctx, r.Fence(), Epoch.Add(time.Minute), "boom"))
	_, err = f.s.ClaimKey(f.ctx, "q", "retried", "h", time.Minute)
	require.NoError(t, err)
	c, err := f.s.CountWork(f.ctx, "q")
	require.NoError(t, err)
	assert.Equal(t, catalog.WorkCounts{Due: 1, Leased: 2, Waiting: 1, Retried: 1}, c)
	// Expired leases count as due.
	f.clock.Advance(2 * time.Minute)
	c, err = f.s.CountWork(f.ctx, "q")
	require.NoError(t, err)
	assert.Equal(t, catalog.WorkCounts{Due: 3, Leased: 0, Waiting: 1, Retried: 1}, c)
}

// testLeaderTermFence: a write fenced by a leader term is refused, with a
// *catalog.StaleTermError and changing nothing, once another holder has
// taken the lease over or the lease lapsed; the current term's writes
// pass and the audit log names their term.
func testLeaderTermFence(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const name = "server"
	ttl := 10 * time.Second
	a, err := f.s.AcquireLeader(f.ctx, name, "a", ttl)
	require.NoError(t, err)
	require.Equal(t, int64(1), a.Term)
	fenced := func(holder string, term int64) context.Context {
		return catalog.WithLeaderFence(catalog.WithActor(f.ctx, "ttl"), &catalog.LeaderFence{Name: name, Holder: holder, Term: term})
	}
	aCtx := fenced("a", 1)

	// The live term writes, and the audit log says which term it was.
	r, err := f.s.Create(aCtx, res("Backup", "", "kept", nil))
	require.NoError(t, err)
	_, err = f.s.Enqueue(aCtx, catalog.WorkItem{Queue: "deletions", Key: "kept"})
	require.NoError(t, err)
	audit, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "Backup", Name: "kept"})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	assert.Equal(t, "ttl (leader term 1)", audit[0].Actor)

	// b takes the lapsed lease over: term 2. Every write of term 1 is
	// refused from now on, however the stale leader got its turn.
	f.clock.Advance(ttl + time.Second)
	b, err := f.s.AcquireLeader(f.ctx, name, "b", ttl)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Term)
	before := snapshotForFence(t, f, name)
	stale := func(what string, err error) {
		t.Helper()
		require.ErrorIs(t, err, catalog.ErrStaleTerm, what)
		var se *catalog.StaleTermError
		require.ErrorAs(t, err, &se, what)
		assert.Equal(t, catalog.LeaderFence{Name: name, Holder: "a", Term: 1}, se.Fence, what)
		require.NotNil(t, se.Current, what)
		assert.Equal(t, "b", se.Current.Holder, what)
		assert.Equal(t, int64(2), se.Current.Term, what)
	}
	_, err = f.s.Create(aCtx, res("Backup", "", "new", nil))
	stale("create", err)
	_, err = f.s.Schedule(aCtx, r.Key(), catalog.ScheduleOptions{Delay: time.Hour, Reason: "TTL expired"})
	stale("schedule", err)
	_, err = f.s.Delete(aCtx, r.Key(), catalog.DeleteOptions{Finalizers: []string{catalog.FinalizerDeleteActions}, Reason: "TTL expired"})
	stale("delete", err)
	upd := *r
	upd.Labels = map[string]string{"x": "y"}
	_, err = f.s.Update(aCtx, &upd)
	stale("update", err)
	_, err = f.s.WriteBatch(aCtx, []catalog.Write{{Create: true, Resource: res("Backup", "", "batched", nil)}})
	stale("write batch", err)
	_, err = f.s.Enqueue(aCtx, catalog.WorkItem{Queue: "deletions", Key: "new"})
	stale("enqueue", err)
	stale("append audit", f.s.AppendAudit(aCtx, catalog.AuditEntry{Time: f.clock.Now(), Action: "x", Kind: "Backup", Name: "kept"}))
	require.Equal(t, before, snapshotForFence(t, f, name), "the refused writes changed nothing")
	// Asking for the lease is never fenced: the stale leader learns it
	// lost it.
	back, err := f.s.AcquireLeader(aCtx, name, "a", ttl)
	require.NoError(t, err)
	assert.Equal(t, "b", back.Holder)

	// The new term writes.
	bCtx := fenced("b", 2)
	_, err = f.s.Schedule(bCtx, r.Key(), catalog.ScheduleOptions{Delay: time.Hour, Reason: "TTL expired"})
	require.NoError(t, err)
	audit, err = f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "Backup", Name: "kept"})
	require.NoError(t, err)
	require.Len(t, audit, 2)
	assert.Equal(t, "ttl (leader term 2)", audit[1].Actor)

	// A term whose lease lapsed, taken over or not, writes nothing.
	f.clock.Advance(ttl)
	_, err = f.s.Undelete(bCtx, r.Key(), "lapsed")
	require.ErrorIs(t, err, catalog.ErrStaleTerm)
	got, err := f.s.Get(f.ctx, r.Key())
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseScheduled, got.Phase)
	// The term is the token, not the holder: a that leads again, in term
	// 3, still cannot write with its term 1.
	again, err := f.s.AcquireLeader(f.ctx, name, "a", ttl)
	require.NoError(t, err)
	require.Equal(t, int64(3), again.Term)
	_, err = f.s.Undelete(aCtx, r.Key(), "term 1")
	require.ErrorIs(t, err, catalog.ErrStaleTerm)
	_, err = f.s.Undelete(fenced("a", 3), r.Key(), "term 3")
	require.NoError(t, err)
	// A lease that was never taken fences everything; a fence without a
	// term is malformed.
	_, err = f.s.Create(catalog.WithLeaderFence(f.ctx, &catalog.LeaderFence{Name: "never", Holder: "a", Term: 1}), res("Backup", "", "n", nil))
	var se *catalog.StaleTermError
	require.ErrorAs(t, err, &se)
	assert.Nil(t, se.Current)
	_, err = f.s.Create(catalog.WithLeaderFence(f.ctx, &catalog.LeaderFence{Name: name, Holder: "b"}), res("Backup", "", "n", nil))
	require.ErrorIs(t, err, catalog.ErrInvalid)
}

// snapshotForFence is what a refused write must leave alone: the
// resources, the work queue and the audit log.
func snapshotForFence(t *testing.T, f *fixture, lease string) string {
	t.Helper()
	page, err := f.s.List(f.ctx, catalog.ListOptions{})
	require.NoError(t, err)
	var out []string
	for _, r := range page.Items {
		out = append(out, fmt.Sprintf("%s %s %d", r.Key(), r.Phase, r.ResourceVersion))
	}
	work, err := f.s.ListWork(f.ctx, "deletions")
	require.NoError(t, err)
	for _, w := range work {
		out = append(out, "work "+w.Key)
	}
	audit, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{})
	require.NoError(t, err)
	out = append(out, fmt.Sprintf("audit %d", len(audit)))
	return fmt.Sprint(out)
}
