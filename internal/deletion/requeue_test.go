package deletion_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
)

// lapseAfterDelete is a catalog whose clock jumps past the leader's lease
// right after a backup is moved to Deleting: the leader's next write
// finds its term over.
type lapseAfterDelete struct {
	catalog.Store
	clock *catalogtest.Clock
}

func (s *lapseAfterDelete) Delete(ctx context.Context, k catalog.Key, o catalog.DeleteOptions) (*catalog.Resource, error) {
	r, err := s.Store.Delete(ctx, k, o)
	s.clock.Advance(time.Minute)
	return r, err
}

// TestACommittedRequestIsQueuedEvenIfTheLeadersTermEndsInBetween: the TTL
// controller (a leader's loop, its writes fenced by its term) requests a
// deletion: the backup goes to Deleting, then its work item is queued in
// a second write. When the term ends between the two (issue 28's
// PostgreSQL fault test saw it), the second write must not be refused:
// the backup would be Deleting with no work item, stranded until the next
// reconciliation, up to 15 minutes later. Queueing is idempotent and a
// deletion runs only for a Deleting backup, so it needs no fence.
func TestACommittedRequestIsQueuedEvenIfTheLeadersTermEndsInBetween(t *testing.T) {
	clock := catalogtest.NewClock(catalogtest.Epoch)
	var wrapped *lapseAfterDelete
	e := deletiontest.New(t, deletiontest.Options{
		Catalog: &catalog.Config{Now: clock.Now},
		Deletion: func(c *deletion.Config) {
			wrapped = &lapseAfterDelete{Store: c.Store.(catalog.Store), clock: clock}
			c.Store = wrapped
		},
	})
	var tarball bytes.Buffer
	require.NoError(t, archivetest.WriteN(&tarball, 3, 100))
	e.AddBackup("expired", &tarball, nil, nil)

	ctx := catalog.WithActor(e.Ctx, "ttl")
	l, err := e.Store.AcquireLeader(ctx, "lethe-server", "leader", 10*time.Second)
	require.NoError(t, err)
	ctx = catalog.WithLeaderFence(ctx, &catalog.LeaderFence{Name: "lethe-server", Holder: "leader", Term: l.Term})

	_, err = e.Deleter.Delete(ctx, "expired", deletion.Options{Reason: "TTL expired", Async: true, Unattended: true})
	require.NoError(t, err)
	r, err := e.Store.Get(e.Ctx, backup.Key("expired"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
	items, err := e.Store.ListWork(e.Ctx, deletion.Queue)
	require.NoError(t, err)
	require.Len(t, items, 1, "the Deleting backup has its work item")
	require.Equal(t, r.UID, items[0].Key)
}

// cutAfterDelete is a catalog whose connection is cut right after a
// backup is moved to Deleting: every Enqueue fails.
type cutAfterDelete struct{ catalog.Store }

func (s *cutAfterDelete) Enqueue(context.Context, catalog.WorkItem) (*catalog.WorkItem, error) {
	return nil, errors.New("read tcp 127.0.0.1:5432: connection reset by peer")
}

// TestARequestAndItsWorkItemAreOneWrite: a deletion request moves the
// backup to Deleting and queues its work item in one transaction, so a
// connection cut after the request's write cannot strand the backup in
// Deleting with no work item (it would wait for the reconciliation, up
// to 15 minutes).
func TestARequestAndItsWorkItemAreOneWrite(t *testing.T) {
	e := deletiontest.New(t, deletiontest.Options{
		Deletion: func(c *deletion.Config) { c.Store = &cutAfterDelete{Store: c.Store.(catalog.Store)} },
	})
	var tarball bytes.Buffer
	require.NoError(t, archivetest.WriteN(&tarball, 3, 100))
	e.AddBackup("expired", &tarball, nil, nil)

	_, err := e.Deleter.Delete(catalog.WithActor(e.Ctx, "ttl"), "expired", deletion.Options{Reason: "TTL expired", Async: true, Unattended: true})
	require.NoError(t, err, "the request queued its work item itself")
	r, err := e.Store.Get(e.Ctx, backup.Key("expired"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
	items, err := e.Store.ListWork(e.Ctx, deletion.Queue)
	require.NoError(t, err)
	require.Len(t, items, 1, "the Deleting backup has its work item")
	require.Equal(t, r.UID, items[0].Key)
}
