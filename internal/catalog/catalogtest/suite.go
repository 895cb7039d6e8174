package catalogtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	t.Run("Counts", func(t *testing.T) { testCounts(t, newStore) })
	t.Run("WriteClosingACycleIsRefused", func(t *testing.T) { testWriteClosingACycleIsRefused(t, newStore) })
	t.Run("ConcurrentWritesNeverStoreACycle", func(t *testing.T) { testConcurrentWritesNeverStoreACycle(t, newStore) })
	t.Run("UndeleteLeavesTheCascades", func(t *testing.T) { testUndeleteLeavesTheCascades(t, newStore) })
	t.Run("DeletionRoot", func(t *testing.T) { testDeletionRoot(t, newStore) })
	t.Run("PeerReferenceQueuesItsIntentWithTheEdge", func(t *testing.T) { testPeerReferenceQueuesItsIntentWithTheEdge(t, newStore) })
	t.Run("PeerAnswerMovesTheEdgeAndOnlyAnAnswerDoes", func(t *testing.T) { testPeerAnswerMovesTheEdgeAndOnlyAnAnswerDoes(t, newStore) })
	t.Run("BackReferenceHoldsItsTarget", func(t *testing.T) { testBackReferenceHoldsItsTarget(t, newStore) })
	t.Run("Tokens", func(t *testing.T) { testTokens(t, newStore) })
	t.Run("ExchangeLogin", func(t *testing.T) { testExchangeLogin(t, newStore) })
}

func testCRUD(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	in := res("Backup", "velero", "nightly", map[string]string{"app": "db"})
	in.Annotations = map[string]string{"a": "b"}
	in.Spec = json.RawMessage(`{"ttl":"720h"}`)
	in.Conditions = []catalog.Condition{{Type: "Ready", Status: "True", LastTransitionTime: Epoch}}
	in.Phase = catalog.PhaseDeleting // ignored: Create always starts Active
	got := f.create(t, in)
	require.NotEmpty(t, got.UID)
	assert.Equal(t, catalog.PhaseActive, got.Phase)
	assert.Nil(t, got.DeletionTimestamp)
	assert.Positive(t, got.ResourceVersion)
	assert.True(t, got.CreatedAt.Equal(Epoch))
	assert.Empty(t, in.UID, "Create must not modify its argument")

	byKey, err := f.s.Get(f.ctx, key("Backup", "velero", "nightly"))
	require.NoError(t, err)
	assert.Equal(t, got.UID, byKey.UID)
	assert.JSONEq(t, `{"ttl":"720h"}`, string(byKey.Spec))
	assert.Equal(t, map[string]string{"app": "db"}, byKey.Labels)
	assert.Equal(t, got.ResourceVersion, byKey.ResourceVersion)
	require.Len(t, byKey.Conditions, 1)
	assert.True(t, byKey.Conditions[0].LastTransitionTime.Equal(Epoch))

	byUID, err := f.s.GetByUID(f.ctx, got.UID)
	require.NoError(t, err)
	assert.Equal(t, byKey.Key(), byUID.Key())

	// Explicit UID is kept; the same key twice is refused.
	withUID := f.create(t, &catalog.Resource{Kind: "Backup", Name: "cluster-scoped", UID: "uid-1"})
	assert.Equal(t, "uid-1", withUID.UID)
	_, err = f.s.Create(f.ctx, res("Backup", "velero", "nightly", nil))
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)
	_, err = f.s.Create(f.ctx, &catalog.Resource{Kind: "Backup", Name: "other", UID: "uid-1"})
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)

	_, err = f.s.Get(f.ctx, key("Backup", "velero", "missing"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = f.s.GetByUID(f.ctx, "no-such-uid")
	require.ErrorIs(t, err, catalog.ErrNotFound)

	for name, bad := range map[string]*catalog.Resource{
		"no name":   {Kind: "Backup"},
		"no kind":   {Name: "x"},
		"bad spec":  {Kind: "Backup", Name: "x", Spec: json.RawMessage(`{`)},
		"bad ref":   {Kind: "Backup", Name: "x", References: []catalog.Reference{{Kind: "K", Name: "n", OnTargetDelete: "explode"}}},
		"owner uid": {Kind: "Backup", Name: "x", Owners: []catalog.OwnerRef{{Kind: "K", Name: "n"}}},
	} {
		_, err := f.s.Create(f.ctx, bad)
		require.ErrorIs(t, err, catalog.ErrInvalid, name)
	}
}

func testCreateBatch(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	out, err := f.s.CreateBatch(f.ctx, []*catalog.Resource{res("K", "", "a", nil), res("K", "", "b", nil), res("K", "", "c", nil)})
	require.NoError(t, err)
	require.Len(t, out, 3)
	for i, r := range out {
		assert.Equal(t, v0+int64(i)+1, r.ResourceVersion)
	}
	// All or nothing: a duplicate in the batch leaves nothing behind.
	_, err = f.s.CreateBatch(f.ctx, []*catalog.Resource{res("K", "", "d", nil), res("K", "", "a", nil)})
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)
	_, err = f.s.Get(f.ctx, key("K", "", "d"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = f.s.CreateBatch(f.ctx, []*catalog.Resource{res("K", "", "e", nil), res("K", "", "e", nil)})
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)
	// The same in a batch big enough for a driver's bulk path (COPY).
	var big []*catalog.Resource
	for i := range 40 {
		big = append(big, res("K", "", fmt.Sprintf("big-%02d", i), nil))
	}
	big = append(big, res("K", "", "b", nil))
	_, err = f.s.CreateBatch(f.ctx, big)
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)
	_, err = f.s.Get(f.ctx, key("K", "", "big-00"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
	v1, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, v0+3, v1)
}

func testUpdate(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	r := f.create(t, res("Backup", "ns", "b", map[string]string{"x": "1"}))
	f.clock.Advance(time.Minute)

	upd := *r
	upd.Labels = map[string]string{"x": "2"}
	upd.Finalizers = []string{"example.com/f"}
	upd.Status = json.RawMessage(`{"ok":true}`)
	upd.Phase = catalog.PhaseDeleting // ignored
	now := Epoch
	upd.DeletionTimestamp = &now // ignored
	got, err := f.s.Update(f.ctx, &upd)
	require.NoError(t, err)
	assert.Greater(t, got.ResourceVersion, r.ResourceVersion)
	assert.Equal(t, catalog.PhaseActive, got.Phase)
	assert.Nil(t, got.DeletionTimestamp)
	assert.Equal(t, "2", got.Labels["x"])
	assert.True(t, got.UpdatedAt.Equal(Epoch.Add(time.Minute)))
	assert.True(t, got.CreatedAt.Equal(Epoch))

	// The stale version conflicts, and changes nothing.
	stale := *r
	stale.Labels = map[string]string{"x": "stale"}
	_, err = f.s.Update(f.ctx, &stale)
	require.ErrorIs(t, err, catalog.ErrConflict)
	cur, err := f.s.Get(f.ctx, r.Key())
	require.NoError(t, err)
	assert.Equal(t, "2", cur.Labels["x"])
	assert.Equal(t, got.ResourceVersion, cur.ResourceVersion)

	// A different UID under the same key conflicts too.
	other := *cur
	other.UID = "someone-else"
	_, err = f.s.Update(f.ctx, &other)
	require.ErrorIs(t, err, catalog.ErrConflict)

	_, err = f.s.Update(f.ctx, res("Backup", "ns", "missing", nil))
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

func testList(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	var batch []*catalog.Resource
	for i := range 30 {
		tier := "gold"
		if i%3 == 0 {
			tier = "silver"
		}
		ns := "a"
		if i%2 == 0 {
			ns = "b"
		}
		batch = append(batch, res("Backup", ns, fmt.Sprintf("bk-%02d", i), map[string]string{"tier": tier, "i": fmt.Sprint(i)}))
	}
	batch = append(batch, res("Restore", "a", "r1", map[string]string{"tier": "gold"}))
	_, err := f.s.CreateBatch(f.ctx, batch)
	require.NoError(t, err)
	_, err = f.s.Schedule(catalog.WithActor(f.ctx, "t"), key("Backup", "a", "bk-01"), catalog.ScheduleOptions{Delay: time.Hour})
	require.NoError(t, err)

	names := func(rs []*catalog.Resource) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Namespace+"/"+r.Name)
		}
		return out
	}
	all, err := f.s.List(f.ctx, catalog.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, all.Items, 31)
	assert.Empty(t, all.Continue)

	kind, err := f.s.List(f.ctx, catalog.ListOptions{Kind: "Backup", Namespace: "a"})
	require.NoError(t, err)
	assert.Len(t, kind.Items, 15)
	assert.Equal(t, "a/bk-01", names(kind.Items)[0], "ordered by namespace and name")

	sched, err := f.s.List(f.ctx, catalog.ListOptions{Phase: catalog.PhaseScheduled})
	require.NoError(t, err)
	assert.Equal(t, []string{"a/bk-01"}, names(sched.Items))

	for sel, want := range map[string]int{
		"tier=silver":                10,
		"tier!=silver":               21,
		"tier in (gold)":             21,
		"tier=gold,i in (1,2,3,4,5)": 4,
		"!tier":                      0,
		"i":                          30,
	} {
		l, err := f.s.List(f.ctx, catalog.ListOptions{LabelSelector: sel})
		require.NoError(t, err, sel)
		assert.Len(t, l.Items, want, sel)
	}
	_, err = f.s.List(f.ctx, catalog.ListOptions{LabelSelector: "tier in (("})
	require.ErrorIs(t, err, catalog.ErrInvalid)
	_, err = f.s.List(f.ctx, catalog.ListOptions{Continue: "%%%not-a-token"})
	require.ErrorIs(t, err, catalog.ErrInvalid)

	// Pagination with a selector visits every match once, in order.
	var pages [][]string
	var seen []string
	opts := catalog.ListOptions{Kind: "Backup", LabelSelector: "tier=gold", Limit: 7}
	for {
		page, err := f.s.List(f.ctx, opts)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Items), 7)
		pages = append(pages, names(page.Items))
		seen = append(seen, names(page.Items)...)
		if page.Continue == "" {
			break
		}
		require.Len(t, page.Items, 7, "a page with a continue token is full")
		opts.Continue = page.Continue
		require.Less(t, len(pages), 10, "pagination does not end")
	}
	assert.Len(t, seen, 20)
	assert.IsIncreasing(t, seen)
	assert.Len(t, pages, 3)
}

func testLifecycle(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	r := f.create(t, res("Backup", "ns", "b", nil))
	k := r.Key()

	// Active → Scheduled.
	s, err := f.s.Schedule(catalog.WithActor(f.ctx, "alice"), k, catalog.ScheduleOptions{Delay: time.Hour, Propagation: catalog.PropagationBackground, Reason: "ttl"})
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseScheduled, s.Phase)
	require.NotNil(t, s.DeletionDueAt)
	assert.True(t, s.DeletionDueAt.Equal(Epoch.Add(time.Hour)))
	assert.Equal(t, Epoch.Format(time.RFC3339Nano), s.Annotations[catalog.AnnotationDeletionScheduledAt])
	assert.Greater(t, s.ResourceVersion, r.ResourceVersion)

	// Scheduled → Active.
	u, err := f.s.Undelete(catalog.WithActor(f.ctx, "bob"), k, "oops")
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseActive, u.Phase)
	assert.Nil(t, u.DeletionDueAt)
	assert.NotContains(t, u.Annotations, catalog.AnnotationDeletionScheduledAt)

	// Scheduled, not yet due → Deleting needs Force.
	_, err = f.s.Schedule(catalog.WithActor(f.ctx, "alice"), k, catalog.ScheduleOptions{Delay: time.Hour})
	require.NoError(t, err)
	_, err = f.s.Delete(catalog.WithActor(f.ctx, "alice"), k, catalog.DeleteOptions{})
	requireTransition(t, err, catalog.PhaseScheduled, catalog.PhaseDeleting)
	// Once due, no Force is needed.
	f.clock.Advance(time.Hour)
	d, err := f.s.Delete(catalog.WithActor(f.ctx, "gc"), k, catalog.DeleteOptions{Finalizers: []string{catalog.FinalizerDeleteActions, catalog.FinalizerCascade, catalog.FinalizerCascade}})
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseDeleting, d.Phase)
	require.NotNil(t, d.DeletionTimestamp)
	assert.True(t, d.DeletionTimestamp.Equal(Epoch.Add(time.Hour)))
	assert.Nil(t, d.DeletionDueAt)
	assert.Equal(t, []string{catalog.FinalizerDeleteActions, catalog.FinalizerCascade}, d.Finalizers)
	assert.Equal(t, catalog.PropagationForeground, d.PropagationPolicy)

	// Purge waits for the finalizers.
	err = f.s.Purge(catalog.WithActor(f.ctx, "gc"), k, catalog.PurgeOptions{})
	requireTransition(t, err, catalog.PhaseDeleting, catalog.PhasePurged)
	d, err = f.s.RemoveFinalizer(catalog.WithActor(f.ctx, "gc"), k, catalog.FinalizerCascade)
	require.NoError(t, err)
	assert.Equal(t, []string{catalog.FinalizerDeleteActions}, d.Finalizers)
	again, err := f.s.RemoveFinalizer(catalog.WithActor(f.ctx, "gc"), k, catalog.FinalizerCascade)
	require.NoError(t, err, "removing an absent finalizer is a no-op")
	assert.Equal(t, d.ResourceVersion, again.ResourceVersion)
	_, err = f.s.RemoveFinalizer(catalog.WithActor(f.ctx, "gc"), k, catalog.FinalizerDeleteActions)
	require.NoError(t, err)

	require.NoError(t, f.s.Purge(catalog.WithActor(f.ctx, "gc"), k, catalog.PurgeOptions{Reason: "done", Details: json.RawMessage(`{"plugins":1}`)}))
	_, err = f.s.Get(f.ctx, k)
	require.ErrorIs(t, err, catalog.ErrNotFound)
	ts, err := f.s.GetTombstone(f.ctx, k)
	require.NoError(t, err)
	assert.Equal(t, r.UID, ts.UID)
	assert.Equal(t, "gc", ts.Actor)
	assert.Equal(t, "done", ts.Reason)
	assert.JSONEq(t, `{"plugins":1}`, string(ts.Details))
	assert.True(t, ts.PurgedAt.Equal(Epoch.Add(time.Hour)))
	_, err = f.s.GetTombstone(f.ctx, key("Backup", "ns", "never"))
	require.ErrorIs(t, err, catalog.ErrNotFound)

	// Active → Deleting directly, with Force on a not-yet-due Scheduled,
	// and a forced purge despite finalizers.
	r2 := f.create(t, res("Backup", "ns", "b2", nil))
	_, err = f.s.Schedule(f.ctx, r2.Key(), catalog.ScheduleOptions{Delay: 24 * time.Hour})
	require.NoError(t, err)
	d2, err := f.s.Delete(f.ctx, r2.Key(), catalog.DeleteOptions{Force: true, Propagation: catalog.PropagationOrphan, Finalizers: []string{"x/y"}})
	require.NoError(t, err)
	assert.Equal(t, catalog.PropagationOrphan, d2.PropagationPolicy)
	require.NoError(t, f.s.Purge(catalog.WithActor(f.ctx, "op"), r2.Key(), catalog.PurgeOptions{Force: true}))
	audit, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r2.UID})
	require.NoError(t, err)
	require.NotEmpty(t, audit)
	last := audit[len(audit)-1]
	assert.Equal(t, "force-purge", last.Action)
	assert.Contains(t, string(last.Details), "x/y")

	r3 := f.create(t, res("Backup", "ns", "b3", nil))
	d3, err := f.s.Delete(f.ctx, r3.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseDeleting, d3.Phase)
	require.NoError(t, f.s.Purge(f.ctx, r3.Key(), catalog.PurgeOptions{}))

	// The key can be reused after a purge; the new tombstone wins later.
	r4 := f.create(t, res("Backup", "ns", "b", nil))
	assert.NotEqual(t, r.UID, r4.UID)
}

func testIllegalTransitions(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	active := f.create(t, res("K", "", "active", nil)).Key()
	scheduled := f.create(t, res("K", "", "scheduled", nil)).Key()
	_, err := f.s.Schedule(f.ctx, scheduled, catalog.ScheduleOptions{Delay: time.Hour})
	require.NoError(t, err)
	deleting := f.create(t, res("K", "", "deleting", nil)).Key()
	_, err = f.s.Delete(f.ctx, deleting, catalog.DeleteOptions{Finalizers: []string{"a/b"}})
	require.NoError(t, err)

	for _, tc := range []struct {
		name     string
		do       func() error
		from, to catalog.Phase
	}{
		{"undelete active", func() error { _, err := f.s.Undelete(f.ctx, active, ""); return err }, catalog.PhaseActive, catalog.PhaseActive},
		{"purge active", func() error { return f.s.Purge(f.ctx, active, catalog.PurgeOptions{}) }, catalog.PhaseActive, catalog.PhasePurged},
		{"force purge active", func() error { return f.s.Purge(f.ctx, active, catalog.PurgeOptions{Force: true}) }, catalog.PhaseActive, catalog.PhasePurged},
		{"remove finalizer active", func() error { _, err := f.s.RemoveFinalizer(f.ctx, active, "a/b"); return err }, catalog.PhaseActive, catalog.PhaseActive},
		{"schedule scheduled", func() error {
			_, err := f.s.Schedule(f.ctx, scheduled, catalog.ScheduleOptions{Delay: time.Minute})
			return err
		}, catalog.PhaseScheduled, catalog.PhaseScheduled},
		{"delete scheduled early", func() error { _, err := f.s.Delete(f.ctx, scheduled, catalog.DeleteOptions{}); return err }, catalog.PhaseScheduled, catalog.PhaseDeleting},
		{"purge scheduled", func() error { return f.s.Purge(f.ctx, scheduled, catalog.PurgeOptions{Force: true}) }, catalog.PhaseScheduled, catalog.PhasePurged},
		{"schedule deleting", func() error {
			_, err := f.s.Schedule(f.ctx, deleting, catalog.ScheduleOptions{Delay: time.Minute})
			return err
		}, catalog.PhaseDeleting, catalog.PhaseScheduled},
		{"undelete deleting", func() error { _, err := f.s.Undelete(f.ctx, deleting, ""); return err }, catalog.PhaseDeleting, catalog.PhaseActive},
		{"delete active only if scheduled", func() error {
			_, err := f.s.Delete(f.ctx, active, catalog.DeleteOptions{OnlyIfScheduled: true, Force: true})
			return err
		}, catalog.PhaseActive, catalog.PhaseDeleting},
		{"delete deleting", func() error { _, err := f.s.Delete(f.ctx, deleting, catalog.DeleteOptions{Force: true}); return err }, catalog.PhaseDeleting, catalog.PhaseDeleting},
		{"purge with finalizers", func() error { return f.s.Purge(f.ctx, deleting, catalog.PurgeOptions{}) }, catalog.PhaseDeleting, catalog.PhasePurged},
		{"add finalizer while deleting", func() error {
			cur, err := f.s.Get(f.ctx, deleting)
			require.NoError(t, err)
			cur.Finalizers = append(cur.Finalizers, "new/one")
			_, err = f.s.Update(f.ctx, cur)
			return err
		}, catalog.PhaseDeleting, catalog.PhaseDeleting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v0, err := f.s.CurrentVersion(f.ctx)
			require.NoError(t, err)
			requireTransition(t, tc.do(), tc.from, tc.to)
			v1, err := f.s.CurrentVersion(f.ctx)
			require.NoError(t, err)
			assert.Equal(t, v0, v1, "a refused transition writes nothing")
		})
	}

	// Every lifecycle method on a missing key is ErrNotFound.
	missing := key("K", "", "missing")
	for name, do := range map[string]func() error{
		"schedule": func() error { _, err := f.s.Schedule(f.ctx, missing, catalog.ScheduleOptions{}); return err },
		"undelete": func() error { _, err := f.s.Undelete(f.ctx, missing, ""); return err },
		"delete":   func() error { _, err := f.s.Delete(f.ctx, missing, catalog.DeleteOptions{}); return err },
		"remove":   func() error { _, err := f.s.RemoveFinalizer(f.ctx, missing, "a"); return err },
		"purge":    func() error { return f.s.Purge(f.ctx, missing, catalog.PurgeOptions{}) },
	} {
		require.ErrorIs(t, do(), catalog.ErrNotFound, name)
	}
	_, err = f.s.Schedule(f.ctx, active, catalog.ScheduleOptions{Delay: -time.Second})
	require.ErrorIs(t, err, catalog.ErrInvalid)
	_, err = f.s.Delete(f.ctx, active, catalog.DeleteOptions{Propagation: "Sideways"})
	require.ErrorIs(t, err, catalog.ErrInvalid)

	// Removing the last finalizer by Update is allowed while Deleting.
	cur, err := f.s.Get(f.ctx, deleting)
	require.NoError(t, err)
	cur.Finalizers = nil
	_, err = f.s.Update(f.ctx, cur)
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(f.ctx, deleting, catalog.PurgeOptions{}))
}

func testDue(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	_, ok, err := f.s.NextDue(f.ctx)
	require.NoError(t, err)
	assert.False(t, ok)
	for i, d := range []time.Duration{3 * time.Hour, time.Hour, 2 * time.Hour} {
		r := f.create(t, res("K", "", fmt.Sprintf("r%d", i), nil))
		_, err := f.s.Schedule(f.ctx, r.Key(), catalog.ScheduleOptions{Delay: d})
		require.NoError(t, err)
	}
	f.create(t, res("K", "", "active", nil))
	next, ok, err := f.s.NextDue(f.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, next.Equal(Epoch.Add(time.Hour)))

	due, err := f.s.DueScheduled(f.ctx, Epoch.Add(30*time.Minute), 10)
	require.NoError(t, err)
	assert.Empty(t, due)
	due, err = f.s.DueScheduled(f.ctx, Epoch.Add(2*time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, due, 2)
	assert.Equal(t, "r1", due[0].Name, "oldest first")
	assert.Equal(t, "r2", due[1].Name)
	due, err = f.s.DueScheduled(f.ctx, Epoch.Add(5*time.Hour), 1)
	require.NoError(t, err)
	require.Len(t, due, 1)

	// Undelete and Delete take a resource off the due index.
	_, err = f.s.Undelete(f.ctx, key("K", "", "r1"), "")
	require.NoError(t, err)
	_, err = f.s.Delete(f.ctx, key("K", "", "r2"), catalog.DeleteOptions{Force: true})
	require.NoError(t, err)
	next, ok, err = f.s.NextDue(f.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, next.Equal(Epoch.Add(3*time.Hour)))
}

func testDependents(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	owner := f.create(t, res("Backup", "ns", "owner", nil))
	other := f.create(t, res("Backup", "ns", "other", nil))
	for i := range 3 {
		d := res("Snapshot", "ns", fmt.Sprintf("s%d", i), nil)
		d.Owners = []catalog.OwnerRef{{UID: owner.UID, Kind: "Backup", Name: "owner", BlockOwnerDeletion: i == 0}}
		f.create(t, d)
	}
	both := res("Snapshot", "ns", "both", nil)
	both.Owners = []catalog.OwnerRef{{UID: owner.UID, Kind: "Backup", Name: "owner"}, {UID: other.UID, Kind: "Backup", Name: "other"}}
	f.create(t, both)

	deps, err := f.s.Dependents(f.ctx, owner.UID)
	require.NoError(t, err)
	var names []string
	for _, d := range deps {
		names = append(names, d.Name)
	}
	assert.Equal(t, []string{"both", "s0", "s1", "s2"}, names)
	assert.True(t, deps[1].Owners[0].BlockOwnerDeletion)

	od, err := f.s.Dependents(f.ctx, other.UID)
	require.NoError(t, err)
	require.Len(t, od, 1)

	// Update rewrites the edges.
	cur, err := f.s.Get(f.ctx, key("Snapshot", "ns", "both"))
	require.NoError(t, err)
	cur.Owners = cur.Owners[1:]
	_, err = f.s.Update(f.ctx, cur)
	require.NoError(t, err)
	deps, err = f.s.Dependents(f.ctx, owner.UID)
	require.NoError(t, err)
	assert.Len(t, deps, 3)

	// Purge removes the edges.
	_, err = f.s.Delete(f.ctx, key("Snapshot", "ns", "s1"), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(f.ctx, key("Snapshot", "ns", "s1"), catalog.PurgeOptions{}))
	deps, err = f.s.Dependents(f.ctx, owner.UID)
	require.NoError(t, err)
	assert.Len(t, deps, 2)

	none, err := f.s.Dependents(f.ctx, "nobody")
	require.NoError(t, err)
	assert.Empty(t, none)
}

func testReferrers(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	target := key("Bucket", "", "b1")
	for i, pol := range []catalog.OnTargetDelete{catalog.RefBlock, catalog.RefUnset, catalog.RefCascade} {
		r := res("Backup", "ns", fmt.Sprintf("r%d", i), nil)
		r.References = []catalog.Reference{{Kind: "Bucket", Name: "b1", OnTargetDelete: pol}}
		f.create(t, r)
	}
	elsewhere := res("Backup", "ns", "elsewhere", nil)
	elsewhere.References = []catalog.Reference{{Kind: "Bucket", Name: "b2", OnTargetDelete: catalog.RefAllowDangling}}
	f.create(t, elsewhere)

	refs, err := f.s.Referrers(f.ctx, target)
	require.NoError(t, err)
	require.Len(t, refs, 3)
	assert.Equal(t, "r0", refs[0].Name)
	assert.Equal(t, catalog.RefBlock, refs[0].References[0].OnTargetDelete)

	cur, err := f.s.Get(f.ctx, key("Backup", "ns", "r0"))
	require.NoError(t, err)
	cur.References = nil
	_, err = f.s.Update(f.ctx, cur)
	require.NoError(t, err)
	refs, err = f.s.Referrers(f.ctx, target)
	require.NoError(t, err)
	assert.Len(t, refs, 2)

	_, err = f.s.Delete(f.ctx, key("Backup", "ns", "r1"), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(f.ctx, key("Backup", "ns", "r1"), catalog.PurgeOptions{}))
	refs, err = f.s.Referrers(f.ctx, target)
	require.NoError(t, err)
	require.Len(t, refs, 1)
	assert.Equal(t, "r2", refs[0].Name)
}

func testLeases(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const q = "deletions"
	ttl := time.Minute
	w1, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "a", Payload: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	assert.True(t, w1.RunAt.Equal(Epoch))
	again, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "a", Payload: json.RawMessage(`{"n":2}`)})
	require.NoError(t, err)
	assert.Equal(t, w1.ID, again.ID, "Enqueue is idempotent per key")
	assert.JSONEq(t, `{"n":1}`, string(again.Payload))
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "b"})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "later", RunAt: Epoch.Add(time.Hour)})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "other", Key: "a"})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q})
	require.ErrorIs(t, err, catalog.ErrInvalid)

	// Claim takes due items only, oldest first, up to the limit.
	got, err := f.s.Claim(f.ctx, q, "h1", ttl, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "a", got[0].Key)
	assert.Equal(t, "h1", got[0].Holder)
	assert.True(t, got[0].LeaseExpiresAt.Equal(Epoch.Add(ttl)))
	assert.Equal(t, 1, got[0].Attempts)
	assert.Empty(t, got[0].TakenOverFrom, "a free item is not taken over")
	got2, err := f.s.Claim(f.ctx, q, "h2", ttl, 10)
	require.NoError(t, err)
	require.Len(t, got2, 1)
	assert.Equal(t, "b", got2[0].Key)
	none, err := f.s.Claim(f.ctx, q, "h3", ttl, 10)
	require.NoError(t, err)
	assert.Empty(t, none)

	// ClaimKey on a live lease says who holds it and until when.
	_, err = f.s.ClaimKey(f.ctx, q, "a", "h2", ttl)
	require.ErrorIs(t, err, catalog.ErrLeaseHeld)
	var held *catalog.LeaseHeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, "h1", held.Holder)
	assert.True(t, held.ExpiresAt.Equal(Epoch.Add(ttl)))
	_, err = f.s.ClaimKey(f.ctx, q, "nope", "h2", ttl)
	require.ErrorIs(t, err, catalog.ErrNotFound)

	// Renew extends; a stranger cannot renew.
	f.clock.Advance(30 * time.Second)
	r, err := f.s.Renew(f.ctx, got[0].Fence(), ttl)
	require.NoError(t, err)
	assert.True(t, r.LeaseExpiresAt.Equal(Epoch.Add(30*time.Second+ttl)))
	stranger := got[0].Fence()
	stranger.Holder = "h2"
	_, err = f.s.Renew(f.ctx, stranger, ttl)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)

	// After expiry the lease is taken over, and the old holder has lost it.
	f.clock.Advance(ttl + time.Second)
	taken, err := f.s.Claim(f.ctx, q, "h3", ttl, 10)
	require.NoError(t, err)
	require.Len(t, taken, 2, "both expired leases are taken over")
	assert.Equal(t, 2, taken[0].Attempts)
	assert.ElementsMatch(t, []string{"h1", "h2"}, []string{taken[0].TakenOverFrom, taken[1].TakenOverFrom},
		"a claim of an expired lease says whose it was")
	_, err = f.s.Renew(f.ctx, got[0].Fence(), ttl)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Complete(f.ctx, got[0].Fence()), catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Release(f.ctx, got[0].Fence(), time.Time{}, ""), catalog.ErrLeaseLost)

	// ClaimKey takes over an expired lease, ignoring RunAt.
	later, err := f.s.ClaimKey(f.ctx, q, "later", "h4", ttl)
	require.NoError(t, err)
	assert.Equal(t, "h4", later.Holder)
	re, err := f.s.ClaimKey(f.ctx, q, "later", "h4", ttl)
	require.NoError(t, err, "the holder may re-claim its own item")
	assert.Equal(t, later.Attempts, re.Attempts)
	assert.Equal(t, later.Epoch+1, re.Epoch, "a claim by the same holder is a new claim")
	assert.Empty(t, later.TakenOverFrom)
	assert.Empty(t, re.TakenOverFrom, "re-claiming one's own lease is no takeover")
	require.ErrorIs(t, f.s.Complete(f.ctx, later.Fence()), catalog.ErrLeaseLost, "the earlier claim is fenced off")

	require.NoError(t, f.s.Complete(f.ctx, taken[1].Fence()))
	require.NoError(t, f.s.Complete(f.ctx, re.Fence()))

	// Release sets the next run and the error; the item waits until then.
	require.NoError(t, f.s.Release(f.ctx, taken[0].Fence(), f.clock.Now().Add(time.Hour), "blocked: locked"))
	w, err := f.s.GetWork(f.ctx, q, taken[0].Key)
	require.NoError(t, err)
	assert.Empty(t, w.Holder)
	assert.Equal(t, "blocked: locked", w.LastError)
	assert.True(t, w.RunAt.Equal(f.clock.Now().Add(time.Hour)))
	none, err = f.s.Claim(f.ctx, q, "h5", ttl, 10)
	require.NoError(t, err)
	assert.Empty(t, none)
	f.clock.Advance(time.Hour)
	again2, err := f.s.Claim(f.ctx, q, "h5", ttl, 10)
	require.NoError(t, err)
	require.Len(t, again2, 1)
	assert.Equal(t, taken[0].Key, again2[0].Key)
	assert.Empty(t, again2[0].TakenOverFrom, "a released item is not taken over")

	// Complete removes the item.
	assert.Equal(t, taken[0].Epoch+1, again2[0].Epoch, "every claim increments the epoch")
	require.NoError(t, f.s.Complete(f.ctx, again2[0].Fence()))
	_, err = f.s.GetWork(f.ctx, q, again2[0].Key)
	require.ErrorIs(t, err, catalog.ErrNotFound)

	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "z", RunAt: Epoch})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "y", RunAt: Epoch.Add(time.Second)})
	require.NoError(t, err)
	items, err := f.s.ListWork(f.ctx, q)
	require.NoError(t, err)
	require.Len(t, items, 2)
	assert.Equal(t, "z", items[0].Key, "ordered by run time")
	others, err := f.s.ListWork(f.ctx, "other")
	require.NoError(t, err)
	assert.Len(t, others, 1)

	// ClaimKey of a lease another holder let expire says whose it was;
	// the same holder's own expired lease is no takeover.
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "k"})
	require.NoError(t, err)
	k1, err := f.s.ClaimKey(f.ctx, q, "k", "h6", ttl)
	require.NoError(t, err)
	assert.Empty(t, k1.TakenOverFrom)
	f.clock.Advance(ttl + time.Second)
	k2, err := f.s.ClaimKey(f.ctx, q, "k", "h7", ttl)
	require.NoError(t, err)
	assert.Equal(t, "h6", k2.TakenOverFrom)
	f.clock.Advance(ttl + time.Second)
	k3, err := f.s.ClaimKey(f.ctx, q, "k", "h7", ttl)
	require.NoError(t, err)
	assert.Empty(t, k3.TakenOverFrom)

	_, err = f.s.Claim(f.ctx, q, "h", 0, 1)
	require.ErrorIs(t, err, catalog.ErrInvalid)
}

func testConcurrentClaims(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const n = 60
	for i := range n {
		_, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q", Key: fmt.Sprintf("k%03d", i)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	claims := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("w%d", w)
			for {
				got, err := f.s.Claim(f.ctx, "q", holder, time.Hour, 3)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, it := range got {
					if prev, dup := claims[it.Key]; dup {
						errs <- fmt.Errorf("%s claimed by %s and %s", it.Key, prev, holder)
					}
					claims[it.Key] = holder
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Len(t, claims, n)
}

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

func testAudit(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	r := f.create(t, res("Backup", "ns", "b", nil))
	f.create(t, res("Restore", "ns", "b", nil))
	f.create(t, res("Restore", "other", "b", nil))
	f.clock.Advance(time.Minute)
	_, err := f.s.Schedule(catalog.WithActor(f.ctx, "alice"), r.Key(), catalog.ScheduleOptions{Delay: time.Hour, Reason: "ttl expired"})
	require.NoError(t, err)
	_, err = f.s.Undelete(catalog.WithActor(f.ctx, "bob"), r.Key(), "still needed")
	require.NoError(t, err)
	f.clock.Advance(time.Minute)
	_, err = f.s.Delete(catalog.WithActor(f.ctx, "carol"), r.Key(), catalog.DeleteOptions{Finalizers: []string{"a/b"}})
	require.NoError(t, err)
	_, err = f.s.RemoveFinalizer(catalog.WithActor(f.ctx, "ctrl"), r.Key(), "a/b")
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(catalog.WithActor(f.ctx, "gc"), r.Key(), catalog.PurgeOptions{Reason: "finalized"}))
	require.NoError(t, f.s.AppendAudit(f.ctx, catalog.AuditEntry{Actor: "plugin", Action: "plugin-report", Kind: "Backup", Namespace: "ns", Name: "b", UID: r.UID, Details: json.RawMessage(`{"items":3}`)}))
	require.ErrorIs(t, f.s.AppendAudit(f.ctx, catalog.AuditEntry{Actor: "x"}), catalog.ErrInvalid)

	all, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "Backup", Name: "b"})
	require.NoError(t, err)
	var actions []string
	for _, e := range all {
		actions = append(actions, e.Action)
		assert.Equal(t, r.UID, e.UID)
	}
	assert.Equal(t, []string{"create", "schedule", "undelete", "delete", "remove-finalizer", "purge", "plugin-report"}, actions, "oldest first")
	assert.Equal(t, "tester", all[0].Actor, "Create takes the actor from the context")
	assert.Equal(t, catalog.PhaseActive, all[1].FromPhase)
	assert.Equal(t, catalog.PhaseScheduled, all[1].ToPhase)
	assert.Equal(t, "alice", all[1].Actor)
	assert.Equal(t, "ttl expired", all[1].Reason)
	assert.True(t, all[1].Time.Equal(Epoch.Add(time.Minute)))
	assert.Equal(t, catalog.PhasePurged, all[5].ToPhase)
	assert.JSONEq(t, `{"items":3}`, string(all[6].Details))
	assert.IsIncreasing(t, []int64{all[0].ID, all[1].ID, all[2].ID, all[6].ID})

	last2, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r.UID, Limit: 2})
	require.NoError(t, err)
	require.Len(t, last2, 2)
	assert.Equal(t, "purge", last2[0].Action, "Limit keeps the newest, oldest first")
	since, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Since: Epoch.Add(2 * time.Minute)})
	require.NoError(t, err)
	assert.Len(t, since, 4)
	restores, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "Restore"})
	require.NoError(t, err)
	assert.Len(t, restores, 2)
	// Namespace keeps only that namespace's entries.
	other, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "Restore", Name: "b", Namespace: "other"})
	require.NoError(t, err)
	require.Len(t, other, 1)
	assert.Equal(t, "other", other[0].Namespace)
	inNS, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Namespace: "ns"})
	require.NoError(t, err)
	assert.Len(t, inNS, 8, "the backup's 7 and the restore's create")
}

func testCheckpoints(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	_, _, err := f.s.LoadProgress(f.ctx, "bk")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "deletions", Key: "bk"})
	require.NoError(t, err)
	mine, err := f.s.ClaimKey(f.ctx, "deletions", "bk", "me", time.Minute)
	require.NoError(t, err)
	fence := mine.Fence()

	cp := catalog.Checkpoint{
		Fence:    fence,
		Progress: catalog.DeletionProgress{UID: "bk", Digest: "sha256:x", Watermark: 100, TotalItems: 1000, Counts: map[string]catalog.OutcomeCount{"p": {Done: 97, Failed: 2, Blocked: 1}}},
		Upsert: []catalog.ItemOutcome{
			{Ordinal: 7, ItemKey: "pods/ns/a", Plugin: "p", Outcome: "failed", Message: "boom", Attempts: 1},
			{Ordinal: 3, ItemKey: "pods/ns/b", Plugin: "p", Outcome: "blocked", NextAttemptAt: Epoch.Add(time.Hour)},
			{Ordinal: 7, ItemKey: "pods/ns/a", Plugin: "q", Outcome: "failed"},
		},
	}
	require.NoError(t, f.s.SaveCheckpoint(f.ctx, cp))
	p, outs, err := f.s.LoadProgress(f.ctx, "bk")
	require.NoError(t, err)
	assert.Equal(t, int64(100), p.Watermark)
	assert.Equal(t, int64(2), p.Counts["p"].Failed)
	assert.True(t, p.UpdatedAt.Equal(Epoch))
	require.Len(t, outs, 3)
	assert.Equal(t, int64(3), outs[0].Ordinal, "ordered by ordinal, then plugin")
	assert.Equal(t, "bk", outs[0].UID)
	assert.True(t, outs[0].NextAttemptAt.Equal(Epoch.Add(time.Hour)))
	assert.Equal(t, "q", outs[2].Plugin)

	// Upsert replaces, Settle removes, in one write.
	require.NoError(t, f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{
		Fence:    fence,
		Progress: catalog.DeletionProgress{UID: "bk", Digest: "sha256:x", Watermark: 200, TotalItems: 1000},
		Upsert:   []catalog.ItemOutcome{{Ordinal: 7, Plugin: "p", Outcome: "blocked", Attempts: 2}},
		Settle:   []catalog.ItemOutcome{{Ordinal: 3, Plugin: "p"}, {Ordinal: 7, Plugin: "q"}},
	}))
	p, outs, err = f.s.LoadProgress(f.ctx, "bk")
	require.NoError(t, err)
	assert.Equal(t, int64(200), p.Watermark)
	require.Len(t, outs, 1)
	assert.Equal(t, "blocked", outs[0].Outcome)
	assert.Equal(t, 2, outs[0].Attempts)

	// Once the lease expires and another holder takes it, a fenced write
	// fails and changes nothing.
	f.clock.Advance(2 * time.Minute)
	err = f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{Fence: fence, Progress: catalog.DeletionProgress{UID: "bk", Watermark: 999},
		Settle: []catalog.ItemOutcome{{Ordinal: 7, Plugin: "p"}}})
	require.ErrorIs(t, err, catalog.ErrLeaseLost, "an expired lease is not held")
	_, err = f.s.ClaimKey(f.ctx, "deletions", "bk", "you", time.Minute)
	require.NoError(t, err)
	err = f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{Fence: fence, Progress: catalog.DeletionProgress{UID: "bk", Watermark: 999}})
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	p, outs, err = f.s.LoadProgress(f.ctx, "bk")
	require.NoError(t, err)
	assert.Equal(t, int64(200), p.Watermark)
	assert.Len(t, outs, 1)

	// Unfenced writes need no lease.
	require.NoError(t, f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{Progress: catalog.DeletionProgress{UID: "other", Watermark: 1}}))
	require.ErrorIs(t, f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{}), catalog.ErrInvalid)

	require.NoError(t, f.s.DeleteProgress(f.ctx, "bk"))
	_, _, err = f.s.LoadProgress(f.ctx, "bk")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	require.NoError(t, f.s.DeleteProgress(f.ctx, "bk"), "deleting twice is fine")
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

// testFenceByEpoch: two claims by the same holder (two runs inside one
// process) never both pass the fence. Only the latest claim may write a
// checkpoint, renew, release or complete.
func testFenceByEpoch(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const q = "deletions"
	_, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "bk"})
	require.NoError(t, err)
	first, err := f.s.ClaimKey(f.ctx, q, "bk", "host pid 7", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 1, first.Epoch)
	cp := func(fence *catalog.Fence, wm int64) error {
		return f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{Fence: fence, Progress: catalog.DeletionProgress{UID: "bk", Watermark: wm}})
	}
	require.NoError(t, cp(first.Fence(), 10))

	// The same holder claims again: a new epoch, and the first claim is
	// fenced off although its holder name and lease expiry still match.
	second, err := f.s.ClaimKey(f.ctx, q, "bk", "host pid 7", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 2, second.Epoch)
	require.ErrorIs(t, cp(first.Fence(), 20), catalog.ErrLeaseLost)
	require.NoError(t, cp(second.Fence(), 30))
	_, err = f.s.Renew(f.ctx, first.Fence(), time.Minute)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Release(f.ctx, first.Fence(), time.Time{}, "old run"), catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Complete(f.ctx, first.Fence()), catalog.ErrLeaseLost)
	w, err := f.s.GetWork(f.ctx, q, "bk")
	require.NoError(t, err)
	require.Equal(t, "host pid 7", w.Holder, "the old claim's release changed nothing")
	require.EqualValues(t, 2, w.Epoch)

	// A fenced write through the context: the same rule.
	ctx1 := catalog.WithFence(f.ctx, first.Fence())
	require.ErrorIs(t, f.s.SaveCheckpoint(ctx1, catalog.Checkpoint{Progress: catalog.DeletionProgress{UID: "bk", Watermark: 40}}), catalog.ErrLeaseLost)
	ctx2 := catalog.WithFence(f.ctx, second.Fence())
	require.NoError(t, f.s.SaveCheckpoint(ctx2, catalog.Checkpoint{Progress: catalog.DeletionProgress{UID: "bk", Watermark: 40}}))
	p, _, err := f.s.LoadProgress(f.ctx, "bk")
	require.NoError(t, err)
	require.EqualValues(t, 40, p.Watermark)

	// Claim (the daemon's way) also starts a new epoch once the lease is
	// free again.
	require.NoError(t, f.s.Release(f.ctx, second.Fence(), time.Time{}, ""))
	got, err := f.s.Claim(f.ctx, q, "host pid 7", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.EqualValues(t, 3, got[0].Epoch)
	require.ErrorIs(t, cp(second.Fence(), 50), catalog.ErrLeaseLost)
	require.NoError(t, cp(got[0].Fence(), 50))

	// An expired lease fences its own claim too.
	f.clock.Advance(2 * time.Minute)
	require.ErrorIs(t, cp(got[0].Fence(), 60), catalog.ErrLeaseLost)
	_, err = f.s.Renew(f.ctx, got[0].Fence(), time.Minute)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.ErrorIs(t, cp(&catalog.Fence{}, 60), catalog.ErrInvalid)
}

// testFencedResourceWrites: under a context fence, finalizer removal,
// updates and the purge fail with ErrLeaseLost, changing nothing, once
// the claim is not the latest.
func testFencedResourceWrites(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	r, err := f.s.Create(f.ctx, &catalog.Resource{Kind: "Backup", Name: "b"})
	require.NoError(t, err)
	_, err = f.s.Delete(f.ctx, r.Key(), catalog.DeleteOptions{Finalizers: []string{catalog.FinalizerDeleteActions, "x/y"}})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "deletions", Key: r.UID})
	require.NoError(t, err)
	old, err := f.s.ClaimKey(f.ctx, "deletions", r.UID, "me", time.Minute)
	require.NoError(t, err)
	oldCtx := catalog.WithFence(f.ctx, old.Fence())
	_, err = f.s.RemoveFinalizer(catalog.WithActor(oldCtx, "me"), r.Key(), "x/y")
	require.NoError(t, err, "the live claim passes")

	cur, err := f.s.ClaimKey(f.ctx, "deletions", r.UID, "me", time.Minute)
	require.NoError(t, err)
	_, err = f.s.RemoveFinalizer(catalog.WithActor(oldCtx, "me"), r.Key(), catalog.FinalizerDeleteActions)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	got, err := f.s.Get(f.ctx, r.Key())
	require.NoError(t, err)
	require.Equal(t, []string{catalog.FinalizerDeleteActions}, got.Finalizers, "the fenced-off removal changed nothing")
	got.Labels = map[string]string{"a": "b"}
	_, err = f.s.Update(oldCtx, got)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Purge(catalog.WithActor(oldCtx, "me"), r.Key(), catalog.PurgeOptions{Force: true}), catalog.ErrLeaseLost)
	_, err = f.s.Get(f.ctx, r.Key())
	require.NoError(t, err, "the fenced-off purge changed nothing")

	curCtx := catalog.WithFence(f.ctx, cur.Fence())
	_, err = f.s.RemoveFinalizer(catalog.WithActor(curCtx, "me"), r.Key(), catalog.FinalizerDeleteActions)
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(catalog.WithActor(curCtx, "me"), r.Key(), catalog.PurgeOptions{}))
	_, err = f.s.GetTombstone(f.ctx, r.Key())
	require.NoError(t, err)
}
