package catalogtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testAuditTimesFollowTheLogsOrder: concurrent writers of one resource
// (here, 32 removing one finalizer each) are dated once they hold the
// catalog's write lock, so the audit log's times never go back within
// it. A clock that ticks on every read makes a time taken before the wait
// for the lock show up as an inversion.
func testAuditTimesFollowTheLogsOrder(t *testing.T, newStore NewStoreFunc) {
	t.Parallel()
	var ticks atomic.Int64
	now := func() time.Time { return Epoch.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
	s := newStore(t, &catalog.Config{Now: now, PollInterval: 20 * time.Millisecond})
	ctx := catalog.WithActor(context.Background(), "tester")
	r, err := s.Create(ctx, &catalog.Resource{Kind: "App", Namespace: "ns", Name: "a"})
	require.NoError(t, err)
	const n = 32
	var fins []string
	for i := range n {
		fins = append(fins, fmt.Sprintf("test.lethe.io/f-%02d", i))
	}
	_, err = s.Delete(ctx, r.Key(), catalog.DeleteOptions{Finalizers: fins})
	require.NoError(t, err)

	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, f := range fins {
		wg.Go(func() {
			<-start
			_, err := s.RemoveFinalizer(ctx, r.Key(), f)
			require.NoError(t, err)
		})
	}
	close(start)
	wg.Wait()

	entries, err := s.ListAudit(ctx, catalog.AuditFilter{UID: r.UID})
	require.NoError(t, err)
	require.Len(t, entries, 2+n)
	for i := 1; i < len(entries); i++ {
		require.False(t, entries[i].Time.Before(entries[i-1].Time),
			"audit entry %d (%s at %s) is dated before the one it follows (%s at %s)",
			i, entries[i].Action, entries[i].Time.Format(time.StampMicro), entries[i-1].Action, entries[i-1].Time.Format(time.StampMicro))
	}
}
