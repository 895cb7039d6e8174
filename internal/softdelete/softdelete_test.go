package softdelete_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/softdelete"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingStore counts DueScheduled calls, to show the loop sleeps until
// something is due instead of polling.
type countingStore struct {
	catalog.Store
	due atomic.Int32
}

func (c *countingStore) DueScheduled(ctx context.Context, t time.Time, n int) ([]*catalog.Resource, error) {
	c.due.Add(1)
	return c.Store.DueScheduled(ctx, t, n)
}

func open(t *testing.T) *countingStore {
	t.Helper()
	return openWithClock(t, nil)
}

// openWithClock opens a SQLite catalog on the clock now (time.Now if nil).
func openWithClock(t *testing.T, now func() time.Time) *countingStore {
	t.Helper()
	st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "c.db"), &catalog.Config{PollInterval: 10 * time.Millisecond, Now: now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return &countingStore{Store: st}
}

// patience bounds every wait of these tests on the timers' loop: a loop
// that is broken fails the test instead of hanging it.
const patience = 15 * time.Second

// receive waits for a value from ch, for at most patience.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("waited %s for %s", patience, what)
	}
	panic("unreachable")
}

// send hands v to the loop, for at most patience.
func send[T any](t *testing.T, ch chan<- T, v T) {
	t.Helper()
	select {
	case ch <- v:
	case <-time.After(patience):
		t.Fatalf("the loop did not take a wake-up within %s", patience)
	}
}

// sleepsFor waits until the loop sleeps for exactly d.
func sleepsFor(t *testing.T, sleeps <-chan time.Duration, d time.Duration) {
	t.Helper()
	deadline := time.After(patience)
	for {
		select {
		case got := <-sleeps:
			if got == d {
				return
			}
		case <-deadline:
			t.Fatalf("the loop did not sleep for %s within %s", d, patience)
		}
	}
}

func create(t *testing.T, st catalog.Store, kind, name string) catalog.Key {
	t.Helper()
	r, err := st.Create(context.Background(), &catalog.Resource{Kind: kind, Name: name})
	require.NoError(t, err)
	return r.Key()
}

// TestDueDeletionsFireAndUndeletedOnesDoNot runs the loop on an injected
// clock: test signals say when it sleeps and for how long, and the test
// ends each sleep after moving the clock on. No real waiting.
func TestDueDeletionsFireAndUndeletedOnesDoNot(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := catalogtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := openWithClock(t, clock.Now)
	fired := make(chan string, 10)
	tm, err := softdelete.New(&softdelete.Config{Store: st, Now: clock.Now, Handlers: map[string]softdelete.Handler{
		"Widget": func(ctx context.Context, r *catalog.Resource) error {
			fired <- r.Name
			_, err := st.Delete(catalog.WithActor(ctx, "test"), r.Key(), catalog.DeleteOptions{})
			return err
		},
	}})
	require.NoError(t, err)
	sleeps := make(chan time.Duration, 100)
	wake := make(chan time.Time)
	softdelete.SetTestSignals(tm, func(d time.Duration) { sleeps <- d }, wake)
	done := make(chan error, 1)
	go func() { done <- tm.Run(ctx) }()
	sleepsFor := func(d time.Duration) { t.Helper(); sleepsFor(t, sleeps, d) }
	sleepsFor(softdelete.SafetyScanDefault) // nothing scheduled yet

	keep := create(t, st, "Widget", "keep")
	gone := create(t, st, "Widget", "gone")
	_, err = st.Schedule(catalog.WithActor(ctx, "t"), keep, catalog.ScheduleOptions{Delay: 300 * time.Millisecond})
	require.NoError(t, err)
	_, err = st.Schedule(catalog.WithActor(ctx, "t"), gone, catalog.ScheduleOptions{Delay: 200 * time.Millisecond})
	require.NoError(t, err)
	_, err = st.Undelete(catalog.WithActor(ctx, "t"), keep, "changed my mind")
	require.NoError(t, err)
	sleepsFor(200 * time.Millisecond) // until gone is due, woken by its schedule
	require.Empty(t, fired, "nothing fires before its delay")

	clock.Advance(200 * time.Millisecond)
	send(t, wake, clock.Now())
	require.Equal(t, "gone", receive(t, fired, "the due resource to fire"))
	sleepsFor(softdelete.SafetyScanDefault) // nothing else is scheduled

	// Past keep's old due time: it was undeleted, so nothing fires.
	clock.Advance(time.Second)
	send(t, wake, clock.Now())
	sleepsFor(softdelete.SafetyScanDefault)
	require.Empty(t, fired, "an undeleted resource must not fire")
	r, err := st.Get(ctx, keep)
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)
	r, err = st.Get(ctx, gone)
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)

	cancel()
	require.NoError(t, receive(t, done, "Run to return"))
	// One look per wake-up (start, the schedules, the due time, the
	// safety scan), not a poll every few milliseconds.
	require.Less(t, st.due.Load(), int32(12), "the timer loop must not poll")
}

func TestKindsWithoutAHandlerMoveToDeleting(t *testing.T) {
	ctx := context.Background()
	clock := catalogtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := openWithClock(t, clock.Now)
	k := create(t, st, "Widget", "w")
	_, err := st.Schedule(catalog.WithActor(ctx, "t"), k, catalog.ScheduleOptions{Delay: time.Millisecond})
	require.NoError(t, err)
	clock.Advance(time.Second) // one clock for the catalog and the timers
	tm, err := softdelete.New(&softdelete.Config{Store: st, Now: clock.Now})
	require.NoError(t, err)
	_, err = tm.FireDue(ctx)
	require.NoError(t, err)
	r, err := st.Get(ctx, k)
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
	require.Equal(t, 1, tm.Fired)
}

// TestFailingResourcesDoNotStarveTheRest: a hundred due resources whose
// handler keeps failing must neither hide the next due one nor make the
// loop spin.
func TestFailingResourcesDoNotStarveTheRest(t *testing.T) {
	ctx := context.Background()
	st := open(t)
	for i := range softdelete.BatchDefault {
		k := create(t, st, "Widget", fmt.Sprintf("bad-%03d", i))
		_, err := st.Schedule(catalog.WithActor(ctx, "t"), k, catalog.ScheduleOptions{Delay: time.Millisecond})
		require.NoError(t, err)
	}
	good := create(t, st, "Widget", "good")
	_, err := st.Schedule(catalog.WithActor(ctx, "t"), good, catalog.ScheduleOptions{Delay: time.Second})
	require.NoError(t, err)

	now := time.Now().Add(time.Minute)
	var handled []string
	tm, err := softdelete.New(&softdelete.Config{Store: st, Now: func() time.Time { return now }, Handlers: map[string]softdelete.Handler{
		"Widget": func(ctx context.Context, r *catalog.Resource) error {
			handled = append(handled, r.Name)
			if strings.HasPrefix(r.Name, "bad-") {
				return errors.New("broken")
			}
			_, err := st.Delete(catalog.WithActor(ctx, "t"), r.Key(), catalog.DeleteOptions{})
			return err
		},
	}})
	require.NoError(t, err)
	for range 3 {
		next, err := tm.FireDue(ctx)
		require.NoError(t, err)
		require.True(t, next.After(now) || len(handled) < softdelete.BatchDefault+1, "no busy loop once only failing ones are due")
	}
	require.Contains(t, handled, "good", "the 101st due resource is handled")
	next, err := tm.FireDue(ctx)
	require.NoError(t, err)
	require.True(t, next.After(now), "waits (%s) while only failing resources are due", next.Sub(now))
	require.LessOrEqual(t, next.Sub(now), time.Second, "and looks again within a second")
}

// undeleteAfterList is a gated store: right after the timers list the due
// resources, it undeletes the ones named in undo, so that the undelete
// lands between the timers' list and their write, every time.
type undeleteAfterList struct {
	catalog.Store
	t    *testing.T
	undo map[string]bool
}

func (u *undeleteAfterList) DueScheduled(ctx context.Context, at time.Time, n int) ([]*catalog.Resource, error) {
	due, err := u.Store.DueScheduled(ctx, at, n)
	for _, r := range due {
		if u.undo[r.Name] {
			_, uerr := u.Store.Undelete(catalog.WithActor(ctx, "operator"), r.Key(), "changed my mind")
			require.NoError(u.t, uerr)
		}
	}
	return due, err
}

// TestTimerLosesToAnUndeleteBetweenItsListAndItsWrite: for a kind without
// a handler of its own (anything but a Backup), the timers move a resource
// to Deleting only if it is still Scheduled when they write. An undelete
// that lands after the timers listed it as due wins: the resource stays
// Active, and the timers carry on with the rest of the batch.
func TestTimerLosesToAnUndeleteBetweenItsListAndItsWrite(t *testing.T) {
	ctx := context.Background()
	clock := catalogtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := openWithClock(t, clock.Now)
	kept := create(t, st, "Widget", "kept")
	gone := create(t, st, "Widget", "gone")
	for _, k := range []catalog.Key{kept, gone} {
		_, err := st.Schedule(catalog.WithActor(ctx, "t"), k, catalog.ScheduleOptions{Delay: time.Minute})
		require.NoError(t, err)
	}
	clock.Advance(time.Hour) // both are due
	gated := &undeleteAfterList{Store: st, t: t, undo: map[string]bool{"kept": true}}
	tm, err := softdelete.New(&softdelete.Config{Store: gated, Now: clock.Now})
	require.NoError(t, err)
	next, err := tm.FireDue(ctx)
	require.NoError(t, err)

	r, err := st.Get(ctx, kept)
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase, "the undelete came after the list: it must win")
	require.Nil(t, r.DeletionTimestamp)
	r, err = st.Get(ctx, gone)
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase, "the timers did fire in this pass")
	require.True(t, next.IsZero(), "nothing left to wait for: the lost race is not retried (next %v)", next)
}

// flakyFeed fails the first Watch, as a change feed that drops does.
type flakyFeed struct {
	catalog.Store
	failed atomic.Bool
}

func (f *flakyFeed) Watch(ctx context.Context, opts catalog.WatchOptions) (catalog.Subscription, error) {
	if f.failed.CompareAndSwap(false, true) {
		return nil, errors.New("feed dropped")
	}
	return f.Store.Watch(ctx, opts)
}

// TestTimersOutliveAChangeFeedError: a failing change feed restarts the
// timers' session; it never stops them, so a resource whose delay ends
// is still moved on.
func TestTimersOutliveAChangeFeedError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := open(t)
	k := create(t, st, "Widget", "w")
	_, err := st.Schedule(catalog.WithActor(ctx, "t"), k, catalog.ScheduleOptions{Delay: time.Millisecond})
	require.NoError(t, err)
	fired := make(chan string, 1)
	tm, err := softdelete.New(&softdelete.Config{Store: &flakyFeed{Store: st}, Handlers: map[string]softdelete.Handler{
		"Widget": func(ctx context.Context, r *catalog.Resource) error {
			fired <- r.Name
			_, err := st.Delete(catalog.WithActor(ctx, "test"), r.Key(), catalog.DeleteOptions{})
			return err
		},
	}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- tm.Run(ctx) }()
	select {
	case name := <-fired:
		require.Equal(t, "w", name)
	case err := <-done:
		t.Fatalf("the timers stopped after a change feed error (Run returned %v)", err)
	case <-time.After(patience):
		t.Fatal("the timers did not restart after a change feed error")
	}
	cancel()
	require.NoError(t, receive(t, done, "Run to return"))
}

// TestTimersAreNotWokenByChangesThatScheduleNothing: no periodic scans.
// Creating and changing resources that are not Scheduled does not wake
// the timers; only a resource newly Scheduled does, once.
func TestTimersAreNotWokenByChangesThatScheduleNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := catalogtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := openWithClock(t, clock.Now)
	tm, err := softdelete.New(&softdelete.Config{Store: st, Now: clock.Now})
	require.NoError(t, err)
	sleeps := make(chan time.Duration, 100)
	softdelete.SetTestSignals(tm, func(d time.Duration) { sleeps <- d }, make(chan time.Time))
	done := make(chan error, 1)
	go func() { done <- tm.Run(ctx) }()
	sleepsFor := func(d time.Duration) { t.Helper(); sleepsFor(t, sleeps, d) }
	sleepsFor(softdelete.SafetyScanDefault)
	before := st.due.Load()

	for i := range 20 {
		r, err := st.Create(ctx, &catalog.Resource{Kind: "Widget", Name: fmt.Sprintf("quiet-%02d", i)})
		require.NoError(t, err)
		r.Labels = map[string]string{"touched": "yes"}
		_, err = st.Update(ctx, r)
		require.NoError(t, err)
	}
	// The feed is ordered: once the timers sleep for this one, every
	// change above has been seen.
	k := create(t, st, "Widget", "scheduled")
	_, err = st.Schedule(catalog.WithActor(ctx, "t"), k, catalog.ScheduleOptions{Delay: 10 * time.Minute})
	require.NoError(t, err)
	sleepsFor(10 * time.Minute) // below the safety scan's 15 minutes
	assert.Equal(t, int32(1), st.due.Load()-before, "one look, for the newly scheduled resource; none for the 40 other changes")

	// One scheduled to end after the next due time does not wake them
	// either; one that ends sooner does.
	later := create(t, st, "Widget", "later")
	_, err = st.Schedule(catalog.WithActor(ctx, "t"), later, catalog.ScheduleOptions{Delay: 12 * time.Minute})
	require.NoError(t, err)
	sooner := create(t, st, "Widget", "sooner")
	_, err = st.Schedule(catalog.WithActor(ctx, "t"), sooner, catalog.ScheduleOptions{Delay: 5 * time.Minute})
	require.NoError(t, err)
	sleepsFor(5 * time.Minute)
	assert.Equal(t, int32(2), st.due.Load()-before, "a look for the sooner one only")
	cancel()
	require.NoError(t, receive(t, done, "Run to return"))
}

// TestMoreThanABatchDueIsFiredWithoutWaiting: when more resources are due
// than one batch holds, the timers look again at once, not after a sleep.
func TestMoreThanABatchDueIsFiredWithoutWaiting(t *testing.T) {
	ctx := context.Background()
	clock := catalogtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := openWithClock(t, clock.Now)
	for i := range softdelete.BatchDefault + 1 {
		k := create(t, st, "Widget", fmt.Sprintf("w-%03d", i))
		_, err := st.Schedule(catalog.WithActor(ctx, "t"), k, catalog.ScheduleOptions{Delay: time.Minute})
		require.NoError(t, err)
	}
	clock.Advance(time.Hour)
	tm, err := softdelete.New(&softdelete.Config{Store: st, Now: clock.Now})
	require.NoError(t, err)
	next, err := tm.FireDue(ctx)
	require.NoError(t, err)
	require.Equal(t, softdelete.BatchDefault, tm.Fired)
	require.True(t, next.Equal(clock.Now()), "a full batch: look again now, not at %v", next)
	next, err = tm.FireDue(ctx)
	require.NoError(t, err)
	require.Equal(t, softdelete.BatchDefault+1, tm.Fired)
	require.True(t, next.IsZero(), "nothing left: %v", next)
}

// TestResourcesInBackoffDoNotCrowdOutOnesThatComeDueLater: resources whose
// handler failed wait out their retry, but the batch is widened by as
// many, so a resource that comes due meanwhile is handled at once.
func TestResourcesInBackoffDoNotCrowdOutOnesThatComeDueLater(t *testing.T) {
	ctx := context.Background()
	clock := catalogtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := openWithClock(t, clock.Now)
	bad := softdelete.BatchDefault * 3 / 5 // more than half a batch
	for i := range bad {
		k := create(t, st, "Widget", fmt.Sprintf("bad-%03d", i))
		_, err := st.Schedule(catalog.WithActor(ctx, "t"), k, catalog.ScheduleOptions{Delay: time.Millisecond})
		require.NoError(t, err)
	}
	good := create(t, st, "Widget", "good")
	_, err := st.Schedule(catalog.WithActor(ctx, "t"), good, catalog.ScheduleOptions{Delay: time.Second})
	require.NoError(t, err)
	tm, err := softdelete.New(&softdelete.Config{Store: st, Now: clock.Now, Handlers: map[string]softdelete.Handler{
		"Widget": func(ctx context.Context, r *catalog.Resource) error {
			if strings.HasPrefix(r.Name, "bad-") {
				return errors.New("broken")
			}
			_, err := st.Delete(catalog.WithActor(ctx, "t"), r.Key(), catalog.DeleteOptions{})
			return err
		},
	}})
	require.NoError(t, err)
	clock.Advance(10 * time.Millisecond) // the bad ones are due, good is not yet
	_, err = tm.FireDue(ctx)
	require.NoError(t, err)
	require.Zero(t, tm.Fired)
	clock.Advance(2 * time.Second) // good is due; the bad ones still wait out their retry
	_, err = tm.FireDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, tm.Fired, "the resource that came due is handled, past the ones in backoff")
	r, err := st.Get(ctx, good)
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
}

// TestFailedHandlerIsRetriedOnceItsWaitIsOver: a resource whose handler
// failed is left alone for Config.Retry, then tried again (it is still
// Scheduled and due: nothing is lost).
func TestFailedHandlerIsRetriedOnceItsWaitIsOver(t *testing.T) {
	ctx := context.Background()
	clock := catalogtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := openWithClock(t, clock.Now)
	k := create(t, st, "Widget", "w")
	_, err := st.Schedule(catalog.WithActor(ctx, "t"), k, catalog.ScheduleOptions{Delay: time.Millisecond})
	require.NoError(t, err)
	calls := 0
	tm, err := softdelete.New(&softdelete.Config{Store: st, Now: clock.Now, Handlers: map[string]softdelete.Handler{
		"Widget": func(ctx context.Context, r *catalog.Resource) error {
			calls++
			if calls == 1 {
				return errors.New("broken once")
			}
			_, err := st.Delete(catalog.WithActor(ctx, "t"), r.Key(), catalog.DeleteOptions{})
			return err
		},
	}})
	require.NoError(t, err)
	clock.Advance(time.Second)
	_, err = tm.FireDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, calls)
	clock.Advance(softdelete.RetryDefault / 2)
	_, err = tm.FireDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, calls, "not again before its retry wait is over")
	clock.Advance(softdelete.RetryDefault / 2)
	_, err = tm.FireDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, calls, "tried again once its retry wait is over")
	require.Equal(t, 1, tm.Fired)
}
