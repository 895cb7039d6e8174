package ttl_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/ttl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingStore counts List calls: the controller must list once at start
// and then live off the change feed.
type countingStore struct {
	catalog.Store
	lists atomic.Int32
}

func (c *countingStore) List(ctx context.Context, o catalog.ListOptions) (*catalog.ListResult, error) {
	c.lists.Add(1)
	return c.Store.List(ctx, o)
}

// openStore opens a SQLite catalog in the test's temp dir, closed at the end.
func openStore(t *testing.T) catalog.Store {
	t.Helper()
	st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "c.db"), &catalog.Config{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func addBackup(t *testing.T, st catalog.Store, name string, expires time.Time) {
	t.Helper()
	b := &backup.Backup{Resource: &catalog.Resource{Kind: backup.Kind, Name: name},
		Spec: backup.Spec{StorageKey: backup.StorageKey(name), ExpiresAt: &expires}}
	require.NoError(t, b.Encode())
	_, err := st.Create(context.Background(), b.Resource)
	require.NoError(t, err)
}

func TestExpiredBackupsAreRequestedFromTheIndexWithoutScans(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &countingStore{Store: openStore(t)}

	now := time.Now()
	addBackup(t, st, "expired", now.Add(-time.Hour))
	addBackup(t, st, "later", now.Add(time.Hour))
	noTTL := &backup.Backup{Resource: &catalog.Resource{Kind: backup.Kind, Name: "forever"}}
	require.NoError(t, noTTL.Encode())
	_, err := st.Create(ctx, noTTL.Resource)
	require.NoError(t, err)

	requested := make(chan string, 10)
	c, err := ttl.New(&ttl.Config{Store: st, Request: func(_ context.Context, name string) error {
		requested <- name
		return nil
	}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	require.Equal(t, "expired", <-requested)

	// A backup created while running, expiring soon, is seen through the
	// change feed and requested when it expires.
	addBackup(t, st, "soon", time.Now().Add(200*time.Millisecond))
	require.Equal(t, "soon", <-requested)

	// Nothing else is due: "later" expires in an hour, "forever" never.
	select {
	case name := <-requested:
		t.Fatalf("unexpected request for %s", name)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	require.NoError(t, <-done)
	require.EqualValues(t, 1, st.lists.Load(), "the controller must list once, then use the change feed")
}

func TestNonActiveBackupsAreNotRequested(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := openStore(t)
	addBackup(t, st, "scheduled", time.Now().Add(-time.Minute))
	_, err := st.Schedule(catalog.WithActor(ctx, "t"), backup.Key("scheduled"), catalog.ScheduleOptions{Delay: time.Hour})
	require.NoError(t, err)
	addBackup(t, st, "active", time.Now().Add(-time.Minute))

	requested := make(chan string, 10)
	c, err := ttl.New(&ttl.Config{Store: st, Request: func(_ context.Context, name string) error {
		requested <- name
		return nil
	}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	require.Equal(t, "active", <-requested)
	select {
	case name := <-requested:
		t.Fatalf("a backup already Scheduled must not be requested again: %s", name)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	require.NoError(t, <-done)
}

// TestUndeleteOfAnExpiredBackupSticks: the TTL requested the deletion
// (grace window), the user undeletes it: it must not be requested again,
// and it no longer expires.
func TestUndeleteOfAnExpiredBackupSticks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := openStore(t)
	addBackup(t, st, "old", time.Now().Add(-time.Hour))

	requested := make(chan string, 10)
	c, err := ttl.New(&ttl.Config{Store: st, Request: func(ctx context.Context, name string) error {
		_, err := st.Schedule(catalog.WithActor(ctx, "ttl"), backup.Key(name), catalog.ScheduleOptions{Delay: time.Hour})
		requested <- name
		return err
	}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	require.Equal(t, "old", <-requested)

	_, cleared, err := deletion.Undelete(catalog.WithActor(ctx, "cli:carol"), st, "old", time.Now())
	require.NoError(t, err)
	require.True(t, cleared)
	select {
	case name := <-requested:
		t.Fatalf("the undeleted backup %s was requested again", name)
	case <-time.After(300 * time.Millisecond):
	}
	r, err := st.Get(ctx, backup.Key("old"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.Nil(t, b.Spec.ExpiresAt)
	require.Contains(t, r.Annotations, deletion.AnnotationTTLCleared)
	cancel()
	require.NoError(t, <-done)
}

// addVeleroBackup adds a backup imported from a Velero bucket, whose
// velero-backup.json said phase.
func addVeleroBackup(t *testing.T, st catalog.Store, name, phase string, expires time.Time) {
	t.Helper()
	b := &backup.Backup{Resource: &catalog.Resource{Kind: backup.Kind, Name: name},
		Spec: backup.Spec{StorageKey: backup.StorageKey(name), ExpiresAt: &expires,
			Velero: &backup.VeleroInfo{MetadataKey: "backups/" + name + "/velero-backup.json", Phase: phase}}}
	require.NoError(t, b.Encode())
	_, err := st.Create(context.Background(), b.Resource)
	require.NoError(t, err)
}

func TestTTLWaitsForABackupVeleroHasNotFinished(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := openStore(t)
	now := time.Now()
	// Expired first, but Velero is still writing it: if its expiry fired,
	// it would be requested before "ready".
	addVeleroBackup(t, st, "writing", "Finalizing", now.Add(-2*time.Hour))
	addVeleroBackup(t, st, "ready", "Completed", now.Add(-time.Hour))

	requested := make(chan string, 10)
	c, err := ttl.New(&ttl.Config{Store: st, Request: func(_ context.Context, name string) error {
		requested <- name
		return nil
	}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	require.Equal(t, "ready", <-requested, "an unfinished backup's expiry must wait")

	// A sync records the finished phase: the expiry, long past, fires.
	r, err := st.Get(ctx, backup.Key("writing"))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	b.Spec.Velero.Phase = "PartiallyFailed"
	require.NoError(t, b.Encode())
	_, err = st.Update(ctx, b.Resource)
	require.NoError(t, err)
	select {
	case name := <-requested:
		require.Equal(t, "writing", name)
	case <-time.After(10 * time.Second):
		t.Fatal("the backup's expiry did not fire once Velero finished it")
	}
	cancel()
	require.NoError(t, <-done)
}

// TestFailedRequestIsRetriedWithBackoffNotLeftToTheSafetyScan: a request
// that fails (the storage answering 503 while the deletion is requested,
// issue 28's S3 fault test) is tried again after Retry, doubling, within
// MaxRetry; the list is still read once (no rebuild, no safety scan).
func TestFailedRequestIsRetriedWithBackoffNotLeftToTheSafetyScan(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &countingStore{Store: openStore(t)}
	addBackup(t, st, "expired", time.Now().Add(-time.Minute))

	var calls []time.Time
	requested := make(chan int, 10)
	c, err := ttl.New(&ttl.Config{Store: st, Retry: 100 * time.Millisecond, MaxRetry: 300 * time.Millisecond,
		Request: func(_ context.Context, name string) error {
			calls = append(calls, time.Now())
			requested <- len(calls)
			if len(calls) < 4 {
				return errors.New("storage: 503 Slow Down")
			}
			return nil
		}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for n := 1; n <= 4; n++ {
		select {
		case got := <-requested:
			require.Equal(t, n, got)
		case <-time.After(5 * time.Second):
			t.Fatalf("request %d never came: a failed request is not retried", n)
		}
	}
	// Backoff: 100 ms, 200 ms, then capped at 300 ms.
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond} {
		require.GreaterOrEqual(t, calls[i+1].Sub(calls[i]), want, "wait before try %d", i+2)
	}
	select {
	case n := <-requested:
		t.Fatalf("request %d after one succeeded", n)
	case <-time.After(500 * time.Millisecond):
	}
	cancel()
	require.NoError(t, <-done)
	require.EqualValues(t, 1, st.lists.Load(), "retried from the index, not by a rebuild")
}
