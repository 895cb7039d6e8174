package catalogtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// NewStoreFunc opens a fresh, empty store with cfg. It registers its own
// cleanup (closing the store, dropping the database) on t.
type NewStoreFunc func(t testing.TB, cfg *catalog.Config) catalog.Store

// Epoch is where a suite Clock starts.
var Epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type fixture struct {
	ctx   context.Context
	clock *Clock
	s     catalog.Store
}

func setup(t *testing.T, newStore NewStoreFunc) *fixture {
	t.Helper()
	t.Parallel()
	clock := NewClock(Epoch)
	s := newStore(t, &catalog.Config{Now: clock.Now, PollInterval: 20 * time.Millisecond})
	return &fixture{ctx: catalog.WithActor(context.Background(), "tester"), clock: clock, s: s}
}

func (f *fixture) create(t *testing.T, r *catalog.Resource) *catalog.Resource {
	t.Helper()
	out, err := f.s.Create(f.ctx, r)
	require.NoError(t, err)
	return out
}

func res(kind, ns, name string, lbls map[string]string) *catalog.Resource {
	return &catalog.Resource{Kind: kind, Namespace: ns, Name: name, Labels: lbls}
}

func key(kind, ns, name string) catalog.Key {
	return catalog.Key{Kind: kind, Namespace: ns, Name: name}
}

// requireTransition asserts err is a *TransitionError from→to.
func requireTransition(t *testing.T, err error, from, to catalog.Phase) {
	t.Helper()
	require.ErrorIs(t, err, catalog.ErrInvalidTransition)
	var te *catalog.TransitionError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, from, te.From, "from: %v", err)
	assert.Equal(t, to, te.To, "to: %v", err)
}

// Run is the conformance suite. Every driver runs it.
func Run(t *testing.T, newStore NewStoreFunc) {
	t.Run("CRUD", func(t *testing.T) { testCRUD(t, newStore) })
	t.Run("GetMany", func(t *testing.T) { testGetMany(t, newStore) })
	t.Run("WriteEach", func(t *testing.T) { testWriteEach(t, newStore) })
	t.Run("CreateBatch", func(t *testing.T) { testCreateBatch(t, newStore) })
	t.Run("Update", func(t *testing.T) { testUpdate(t, newStore) })
	t.Run("UpdateAuditsWhatChangedAndNotANoop", func(t *testing.T) { testUpdateAuditsWhatChangedAndNotANoop(t, newStore) })
	t.Run("WriteBatch", func(t *testing.T) { testWriteBatch(t, newStore) })
	t.Run("List", func(t *testing.T) { testList(t, newStore) })
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, newStore) })
	t.Run("IllegalTransitions", func(t *testing.T) { testIllegalTransitions(t, newStore) })
	t.Run("Due", func(t *testing.T) { testDue(t, newStore) })
	t.Run("Dependents", func(t *testing.T) { testDependents(t, newStore) })
	t.Run("Referrers", func(t *testing.T) { testReferrers(t, newStore) })
	t.Run("Leases", func(t *testing.T) { testLeases(t, newStore) })
	t.Run("ConcurrentClaims", func(t *testing.T) { testConcurrentClaims(t, newStore) })
	t.Run("ChangeFeed", func(t *testing.T) { testChangeFeed(t, newStore) })
	t.Run("ChangeFeedConcurrentWriters", func(t *testing.T) { testFeedConcurrent(t, newStore) })
	t.Run("ChangeFeedDeliversABacklogLongerThanOneReadAtOnce", func(t *testing.T) { testFeedDeliversABacklogLongerThanOneReadAtOnce(t, newStore) })
	t.Run("CloseEndsSubscriptions", func(t *testing.T) { testCloseEndsSubscriptions(t, newStore) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, newStore) })
	t.Run("Checkpoints", func(t *testing.T) { testCheckpoints(t, newStore) })
	t.Run("LoadProgressMany", func(t *testing.T) { testLoadProgressMany(t, newStore) })
	t.Run("RemoveFinalizers", func(t *testing.T) { testRemoveFinalizers(t, newStore) })
	t.Run("DeleteMany", func(t *testing.T) { testDeleteMany(t, newStore) })
	t.Run("FenceByEpoch", func(t *testing.T) { testFenceByEpoch(t, newStore) })
	t.Run("FencedResourceWrites", func(t *testing.T) { testFencedResourceWrites(t, newStore) })
	t.Run("AFenceWithoutItsIDOrHolderIsInvalid", func(t *testing.T) { testAFenceWithoutItsIDOrHolderIsInvalid(t, newStore) })
	t.Run("RetryQueue", func(t *testing.T) { testRetryQueue(t, newStore) })
	t.Run("ConcurrentRetryClaims", func(t *testing.T) { testConcurrentRetryClaims(t, newStore) })
	t.Run("Outbox", func(t *testing.T) { testOutbox(t, newStore) })
	t.Run("CollectBatch", func(t *testing.T) { testCollectBatch(t, newStore) })
	t.Run("CollectBatchReplacesTombstone", func(t *testing.T) { testCollectBatchReplacesTombstone(t, newStore) })
	t.Run("PurgeTakesTheEdges", func(t *testing.T) { testPurgeTakesTheEdges(t, newStore) })
	t.Run("PurgeRemovesItsFinalizer", func(t *testing.T) { testPurgeRemovesItsFinalizer(t, newStore) })
	t.Run("ForcedPurgeAuditsExactlyTheFinalizersItSkipped", func(t *testing.T) { testForcedPurgeAuditsExactlyTheFinalizersItSkipped(t, newStore) })
	t.Run("CollectBatchConcurrentWriters", func(t *testing.T) { testCollectBatchConcurrentWriters(t, newStore) })
	t.Run("LeaderLease", func(t *testing.T) { testLeaderLease(t, newStore) })
	t.Run("LeaderLeaseRace", func(t *testing.T) { testLeaderLeaseRace(t, newStore) })
	t.Run("LeaderTermFence", func(t *testing.T) { testLeaderTermFence(t, newStore) })
	t.Run("Wakeups", func(t *testing.T) { testWakeups(t, newStore) })
	t.Run("NextAvailable", func(t *testing.T) { testNextAvailable(t, newStore) })
	t.Run("DeleteQueuesItsWorkItemInTheSameWrite", func(t *testing.T) { testDeleteQueuesItsWorkItemInTheSameWrite(t, newStore) })
	t.Run("EnqueueRacingCompleteNeverFails", func(t *testing.T) { testEnqueueRacingCompleteNeverFails(t, newStore) })
	t.Run("AuditTimesFollowTheLogsOrder", func(t *testing.T) { testAuditTimesFollowTheLogsOrder(t, newStore) })
	t.Run("Counts", func(t *testing.T) { testCounts(t, newStore) })
	t.Run("WriteClosingACycleIsRefused", func(t *testing.T) { testWriteClosingACycleIsRefused(t, newStore) })
	t.Run("ConcurrentWritesNeverStoreACycle", func(t *testing.T) { testConcurrentWritesNeverStoreACycle(t, newStore) })
	t.Run("UndeleteLeavesTheCascades", func(t *testing.T) { testUndeleteLeavesTheCascades(t, newStore) })
	t.Run("DeletionRoot", func(t *testing.T) { testDeletionRoot(t, newStore) })
	t.Run("PeerReferenceQueuesItsIntentWithTheEdge", func(t *testing.T) { testPeerReferenceQueuesItsIntentWithTheEdge(t, newStore) })
	t.Run("PeerAnswerMovesTheEdgeAndOnlyAnAnswerDoes", func(t *testing.T) { testPeerAnswerMovesTheEdgeAndOnlyAnAnswerDoes(t, newStore) })
	t.Run("BackReferenceHoldsItsTarget", func(t *testing.T) { testBackReferenceHoldsItsTarget(t, newStore) })
	t.Run("PurgedReferrerDropsItsPeerEdges", func(t *testing.T) { testPurgedReferrerDropsItsPeerEdges(t, newStore) })
	t.Run("DroppedBackReferenceFreesItsTarget", func(t *testing.T) { testDroppedBackReferenceFreesItsTarget(t, newStore) })
	t.Run("Tokens", func(t *testing.T) { testTokens(t, newStore) })
	t.Run("ExchangeLogin", func(t *testing.T) { testExchangeLogin(t, newStore) })
}

// RunSchemaTooNew checks that a database migrated by a newer binary is
// refused. open opens (and migrates) the same database each call; bump
// marks that database as migrated to a version this binary does not know.
func RunSchemaTooNew(t *testing.T, open func() (catalog.Store, error), bump func(t *testing.T)) {
	s, err := open()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	s, err = open()
	require.NoError(t, err, "reopening at the current version works")
	require.NoError(t, s.Close())
	bump(t)
	s, err = open()
	if s != nil {
		_ = s.Close()
	}
	require.ErrorIs(t, err, catalog.ErrSchemaTooNew)
	assert.Contains(t, err.Error(), "upgrade Lethe")
	assert.False(t, errors.Is(err, catalog.ErrNotFound))
}

// RunConcurrentOpen opens the same fresh database from several stores at
// once (as several processes starting together would): migrations run
// exactly once and every open succeeds.
func RunConcurrentOpen(t *testing.T, open func() (catalog.Store, error)) {
	const n = 6
	stores := make([]catalog.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			stores[i], errs[i] = open()
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "open %d", i)
	}
	ctx := context.Background()
	_, err := stores[0].Create(ctx, &catalog.Resource{Kind: "K", Name: "n"})
	require.NoError(t, err)
	for _, s := range stores {
		_, err := s.Get(ctx, catalog.Key{Kind: "K", Name: "n"})
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}
}
