package catalogtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func collect(t *testing.T, sub catalog.Subscription, n int) []catalog.Event {
	t.Helper()
	var out []catalog.Event
	timeout := time.NewTimer(30 * time.Second) // a hang guard, not a timing assertion
	defer timeout.Stop()
	for len(out) < n {
		select {
		case ev, ok := <-sub.Events():
			require.True(t, ok, "subscription closed early: %v", sub.Err())
			out = append(out, ev)
		case <-timeout.C:
			require.FailNow(t, "change feed stalled", "got %d of %d events", len(out), n)
		}
	}
	return out
}

func testChangeFeed(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{FromVersion: v0})
	require.NoError(t, err)
	defer sub.Close()

	r := f.create(t, res("Backup", "", "b", nil))
	f.create(t, res("Other", "", "o", nil))
	r.Labels = map[string]string{"x": "y"}
	_, err = f.s.Update(f.ctx, r)
	require.NoError(t, err)
	_, err = f.s.Delete(f.ctx, r.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(f.ctx, r.Key(), catalog.PurgeOptions{}))
	// Work items and audit entries are not resource changes.
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q", Key: "k"})
	require.NoError(t, err)

	evs := collect(t, sub, 5)
	var types []catalog.EventType
	for i, ev := range evs {
		types = append(types, ev.Type)
		assert.Equal(t, v0+int64(i)+1, ev.Version, "versions are consecutive")
		assert.Equal(t, ev.Version, ev.Resource.ResourceVersion)
	}
	assert.Equal(t, []catalog.EventType{catalog.EventAdded, catalog.EventAdded, catalog.EventUpdated, catalog.EventUpdated, catalog.EventDeleted}, types)
	assert.Equal(t, catalog.PhaseDeleting, evs[4].Resource.Phase, "DELETED carries the last state")
	cv, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, evs[4].Version, cv)

	// Resume from the middle, with a kind filter.
	sub2, err := f.s.Watch(f.ctx, catalog.WatchOptions{FromVersion: evs[1].Version, Kind: "Backup"})
	require.NoError(t, err)
	resumed := collect(t, sub2, 3)
	for i, ev := range resumed {
		assert.Equal(t, evs[i+2].Version, ev.Version)
		assert.Equal(t, "Backup", ev.Resource.Kind)
	}
	require.NoError(t, sub2.Close())
	_, open := <-sub2.Events()
	assert.False(t, open, "Close closes the channel")
	assert.NoError(t, sub2.Err())

	// Cancelling the context ends a subscription cleanly too.
	ctx, cancel := context.WithCancel(f.ctx)
	sub3, err := f.s.Watch(ctx, catalog.WatchOptions{FromVersion: cv})
	require.NoError(t, err)
	cancel()
	for range sub3.Events() {
		t.Fatal("no event expected")
	}
	assert.NoError(t, sub3.Err())
	require.NoError(t, sub3.Close())
}

// testFeedConcurrent: many concurrent writers; the subscriber sees every
// version exactly once, in order.
func testFeedConcurrent(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{})
	require.NoError(t, err)
	defer sub.Close()
	const writers, each = 4, 15
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, err := f.s.Create(f.ctx, res("K", "", fmt.Sprintf("w%d-%d", w, i), nil))
				assert.NoError(t, err)
			}
		}()
	}
	evs := collect(t, sub, writers*each)
	wg.Wait()
	for i := 1; i < len(evs); i++ {
		require.Equal(t, evs[i-1].Version+1, evs[i].Version)
	}
}

func testCloseEndsSubscriptions(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	f.create(t, res("K", "", "a", nil))
	sub, err := f.s.Watch(f.ctx, catalog.WatchOptions{})
	require.NoError(t, err)
	require.NoError(t, f.s.Close())
	for range sub.Events() { // must end: Close ends the subscription
	}
	require.ErrorIs(t, sub.Err(), catalog.ErrClosed)
	require.NoError(t, sub.Close())
	require.NoError(t, f.s.Close(), "closing twice is fine")
	_, err = f.s.Watch(f.ctx, catalog.WatchOptions{})
	require.ErrorIs(t, err, catalog.ErrClosed)
}
