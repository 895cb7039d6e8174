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

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/catalog"
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
	st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "c.db"), &catalog.Config{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return &countingStore{Store: st}
}

func create(t *testing.T, st catalog.Store, kind, name string) catalog.Key {
	t.Helper()
	r, err := st.Create(context.Background(), &catalog.Resource{Kind: kind, Name: name})
	require.NoError(t, err)
	return r.Key()
}

func TestDueDeletionsFireAndUndeletedOnesDoNot(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := open(t)
	fired := make(chan string, 10)
	tm, err := softdelete.New(&softdelete.Config{Store: st, Handlers: map[string]softdelete.Handler{
		"Widget": func(ctx context.Context, r *catalog.Resource) error {
			fired <- r.Name
			_, err := st.Delete(ctx, r.Key(), catalog.DeleteOptions{Actor: "test"})
			return err
		},
	}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- tm.Run(ctx) }()

	keep := create(t, st, "Widget", "keep")
	gone := create(t, st, "Widget", "gone")
	_, err = st.Schedule(ctx, keep, catalog.ScheduleOptions{Delay: 300 * time.Millisecond, Actor: "t"})
	require.NoError(t, err)
	_, err = st.Schedule(ctx, gone, catalog.ScheduleOptions{Delay: 200 * time.Millisecond, Actor: "t"})
	require.NoError(t, err)
	_, err = st.Undelete(ctx, keep, "t", "changed my mind")
	require.NoError(t, err)

	require.Equal(t, "gone", <-fired)
	select {
	case name := <-fired:
		t.Fatalf("undeleted resource fired: %s", name)
	case <-time.After(400 * time.Millisecond):
	}
	r, err := st.Get(ctx, keep)
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)
	r, err = st.Get(ctx, gone)
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)

	cancel()
	require.NoError(t, <-done)
	// One look per wake-up (start, two schedules, the due time, the
	// undelete), not a poll every few milliseconds.
	require.Less(t, st.due.Load(), int32(12), "the timer loop must not poll")
}

func TestKindsWithoutAHandlerMoveToDeleting(t *testing.T) {
	ctx := context.Background()
	st := open(t)
	k := create(t, st, "Widget", "w")
	_, err := st.Schedule(ctx, k, catalog.ScheduleOptions{Delay: time.Millisecond, Actor: "t"})
	require.NoError(t, err)
	tm, err := softdelete.New(&softdelete.Config{Store: st, Now: func() time.Time { return time.Now().Add(time.Second) }})
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
		_, err := st.Schedule(ctx, k, catalog.ScheduleOptions{Delay: time.Millisecond, Actor: "t"})
		require.NoError(t, err)
	}
	good := create(t, st, "Widget", "good")
	_, err := st.Schedule(ctx, good, catalog.ScheduleOptions{Delay: time.Second, Actor: "t"})
	require.NoError(t, err)

	now := time.Now().Add(time.Minute)
	var handled []string
	tm, err := softdelete.New(&softdelete.Config{Store: st, Now: func() time.Time { return now }, Handlers: map[string]softdelete.Handler{
		"Widget": func(ctx context.Context, r *catalog.Resource) error {
			handled = append(handled, r.Name)
			if strings.HasPrefix(r.Name, "bad-") {
				return errors.New("broken")
			}
			_, err := st.Delete(ctx, r.Key(), catalog.DeleteOptions{Actor: "t"})
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
