package catalogtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testFeedDeliversABacklogLongerThanOneReadAtOnce: a watcher that starts
// behind more changes than one read of the change table takes (500) gets
// every one of them at once, in order, without waiting for a later commit
// or a poll. The poll is set to an hour, so a feed that stopped after a
// full read and waited for a wake-up would never deliver the rest.
func testFeedDeliversABacklogLongerThanOneReadAtOnce(t *testing.T, newStore NewStoreFunc) {
	t.Parallel()
	s := newStore(t, &catalog.Config{Now: NewClock(Epoch).Now, PollInterval: time.Hour})
	ctx := catalog.WithActor(context.Background(), "tester")
	v0, err := s.CurrentVersion(ctx)
	require.NoError(t, err)
	const n = 501 // one full read of the feed, and one more
	batch := make([]*catalog.Resource, n)
	for i := range batch {
		batch[i] = res("Backlog", "", fmt.Sprintf("b%03d", i), nil)
	}
	_, err = s.CreateBatch(ctx, batch)
	require.NoError(t, err)

	sub, err := s.Watch(ctx, catalog.WatchOptions{FromVersion: v0})
	require.NoError(t, err)
	defer sub.Close()
	evs := collect(t, sub, n)
	for i, ev := range evs {
		require.Equal(t, v0+int64(i)+1, ev.Version, "every change once, in order")
	}
}
