package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/postgres"
)

// TestWakeupsReachOtherReplicas: two stores on one schema stand for two
// replicas. What one enqueues, releases or resigns wakes the other, through
// LISTEN/NOTIFY alone: the other store has never written, so nothing in its
// own process could wake it.
func TestWakeupsReachOtherReplicas(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	schema := testSchema(t, url)
	open := func() catalog.Store {
		s, err := postgres.Open(context.Background(), url, &catalog.Config{Schema: schema, PollInterval: time.Hour})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}
	a, b := open(), open()
	ctx := catalog.WithActor(context.Background(), "tester")
	w, err := b.Wakeups(ctx)
	require.NoError(t, err)
	defer w.Close()
	next := func() string {
		select {
		case topic := <-w.C():
			return topic
		case <-time.After(30 * time.Second):
			t.Fatal("no wake-up reached the other replica")
			return ""
		}
	}
	_, err = a.Enqueue(ctx, catalog.WorkItem{Queue: "deletion", Key: "k"})
	require.NoError(t, err)
	require.Equal(t, "deletion", next())
	got, err := a.Claim(ctx, "deletion", "a", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, a.Release(ctx, got[0].Fence(), time.Time{}, ""))
	require.Equal(t, "deletion", next())
	_, err = a.AcquireLeader(ctx, "server", "a", time.Minute)
	require.NoError(t, err)
	require.NoError(t, a.ResignLeader(ctx, "server", "a"))
	require.Equal(t, catalog.WakeTopicLeaderPrefix+"server", next())
}
