package catalogtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// A forward edge removed from its living referrer (apply of a manifest
// without the reference): the edge goes and its peer is told, in one
// transaction, unless the peer can hold no stub for it; a drop never
// overtakes a registration in flight.

func messageOf(t *testing.T, f *fixture, typ catalog.PeerMessageType, key string) *catalog.PeerMessage {
	t.Helper()
	msgs, err := f.s.PeerMessages(f.ctx, "")
	require.NoError(t, err)
	for _, m := range msgs {
		if m.Type == typ && m.IdempotencyKey == key {
			return m
		}
	}
	return nil
}

func testRemovedPeerReferenceIsDroppedOnItsPeer(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	app := f.create(t, res("App", "ns", "web", nil))
	add := func(target string) *catalog.PeerReference {
		e, err := f.s.AddPeerReference(f.ctx, catalog.PeerReference{Referrer: catalog.ObjectRef{Kind: "App", Namespace: "ns", Name: "web"},
			Peer: "eu", Target: key("Database", "ns", target), OnTargetDelete: catalog.RefBlock})
		require.NoError(t, err)
		return e
	}
	remove := func(e *catalog.PeerReference) bool {
		t.Helper()
		removed, err := f.s.RemovePeerReference(f.ctx, *e)
		require.NoError(t, err)
		return removed
	}
	edges := func() int {
		es, err := f.s.PeerReferencesOf(f.ctx, []string{app.UID})
		require.NoError(t, err)
		return len(es)
	}

	// An acknowledged edge: removed, and its drop queued with it.
	acked := add("orders")
	require.Len(t, deliverAll(t, f), 1)
	stale := *acked
	stale.IdempotencyKey = "another"
	_, err := f.s.RemovePeerReference(f.ctx, stale)
	require.ErrorIs(t, err, catalog.ErrConflict, "an edge replaced since it was read is not removed")
	require.Equal(t, 1, edges())
	require.Empty(t, pendingOfType(t, f, catalog.PeerMsgDropBackReference), "a refused removal queues nothing")
	require.True(t, remove(acked))
	require.Equal(t, 0, edges(), "the edge is gone")
	drops := pendingOfType(t, f, catalog.PeerMsgDropBackReference)
	require.Len(t, drops, 1, "the removal queues the drop in its transaction")
	assert.Equal(t, acked.IdempotencyKey, drops[0].IdempotencyKey)
	assert.Equal(t, "eu", drops[0].Peer)
	assert.Contains(t, auditActions(t, f, app.UID), catalog.AuditPeerReferenceRemoved)
	require.False(t, remove(acked), "removing it again is a no-op")
	require.Len(t, pendingOfType(t, f, catalog.PeerMsgDropBackReference), 1, "and queues no second drop")
	cur, err := f.s.Get(f.ctx, app.Key())
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseActive, cur.Phase, "the referrer stays as it is")
	require.Len(t, deliverAll(t, f), 1)

	// A registration never sent is cancelled: it made no stub, so nothing
	// is dropped.
	never := add("never")
	require.True(t, remove(never))
	reg := messageOf(t, f, catalog.PeerMsgRegisterBackReference, never.IdempotencyKey)
	require.NotNil(t, reg)
	assert.Equal(t, catalog.NotificationFailed, reg.State, "the unsent registration is cancelled")
	assert.Nil(t, messageOf(t, f, catalog.PeerMsgDropBackReference, never.IdempotencyKey), "no drop for a stub that cannot exist")

	// Tried but unanswered, and not in flight: cancelled (it is never sent
	// again), and dropped in case the peer stored it before the answer was
	// lost.
	tried := add("tried")
	claimed, err := f.s.ClaimPeerMessages(f.ctx, "test", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, f.s.RetryPeerMessage(f.ctx, claimed[0].ID, claimed[0].Lease, f.clock.Now(), "unreachable"))
	require.True(t, remove(tried))
	assert.Equal(t, catalog.NotificationFailed, messageOf(t, f, catalog.PeerMsgRegisterBackReference, tried.IdempotencyKey).State)
	got := deliverAll(t, f)
	require.Len(t, got, 1, "only the drop is sent")
	assert.Equal(t, catalog.PeerMsgDropBackReference, got[0].Type)
	assert.Equal(t, tried.IdempotencyKey, got[0].IdempotencyKey)

	// In flight (claimed, lease live): the registration is left to its
	// claim, and the drop waits for it, whatever their order in time.
	flying := add("flying")
	claimed, err = f.s.ClaimPeerMessages(f.ctx, "test", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.True(t, remove(flying))
	require.NotNil(t, messageOf(t, f, catalog.PeerMsgDropBackReference, flying.IdempotencyKey), "the drop is queued")
	f.clock.Advance(time.Second)
	held, err := f.s.ClaimPeerMessages(f.ctx, "other", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, held, "a drop is not sent while its registration is in flight")
	// No answer to the registration: it is cancelled, not put off, and the
	// drop goes.
	require.NoError(t, f.s.RetryPeerMessage(f.ctx, claimed[0].ID, claimed[0].Lease, f.clock.Now(), "unreachable"))
	reg = messageOf(t, f, catalog.PeerMsgRegisterBackReference, flying.IdempotencyKey)
	assert.Equal(t, catalog.NotificationFailed, reg.State, "a registration whose edge went is not sent again")
	got = deliverAll(t, f)
	require.Len(t, got, 1)
	assert.Equal(t, catalog.PeerMsgDropBackReference, got[0].Type)

	// In flight and answered: the drop goes after the answer.
	answered := add("answered")
	claimed, err = f.s.ClaimPeerMessages(f.ctx, "test", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.True(t, remove(answered))
	held, err = f.s.ClaimPeerMessages(f.ctx, "other", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, held)
	require.NoError(t, f.s.AnswerPeerMessage(f.ctx, claimed[0].ID, claimed[0].Lease, catalog.PeerAnswer{Accepted: true}))
	got = deliverAll(t, f)
	require.Len(t, got, 1, "the drop follows the answered registration")
	assert.Equal(t, answered.IdempotencyKey, got[0].IdempotencyKey)
	assert.Equal(t, catalog.PeerMsgDropBackReference, got[0].Type)

	// A refused edge: the peer holds no stub, nothing is sent.
	refused := add("refused")
	claimed, err = f.s.ClaimPeerMessages(f.ctx, "test", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, f.s.AnswerPeerMessage(f.ctx, claimed[0].ID, claimed[0].Lease, catalog.PeerAnswer{Reason: "no such target"}))
	require.True(t, remove(refused))
	assert.Nil(t, messageOf(t, f, catalog.PeerMsgDropBackReference, refused.IdempotencyKey))
	require.Equal(t, 0, edges())
	n := 0
	for _, a := range auditActions(t, f, app.UID) {
		if a == catalog.AuditPeerReferenceRemoved {
			n++
		}
	}
	assert.Equal(t, 6, n, "each removal is audited once")

	rs, err := f.s.PeerReferrers(f.ctx)
	require.NoError(t, err)
	assert.Empty(t, rs, "no referrer has an edge left")

	// Bad input changes nothing.
	kept := add("kept")
	rs, err = f.s.PeerReferrers(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{app.UID}, rs)
	bad := *kept
	bad.Referrer.UID = ""
	_, err = f.s.RemovePeerReference(f.ctx, bad)
	require.ErrorIs(t, err, catalog.ErrInvalid)
	bad.Referrer.UID = "no-such-uid"
	_, err = f.s.RemovePeerReference(f.ctx, bad)
	require.ErrorIs(t, err, catalog.ErrNotFound)
	require.Equal(t, 1, edges())
	none, err := f.s.PeerReferencesOf(f.ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, none)
}

// testRemovePeerReferenceIsFenced: a removal under a stale leader term is
// refused and changes nothing.
func testRemovePeerReferenceIsFenced(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	f.create(t, res("App", "ns", "web", nil))
	e, err := f.s.AddPeerReference(f.ctx, catalog.PeerReference{Referrer: catalog.ObjectRef{Kind: "App", Namespace: "ns", Name: "web"},
		Peer: "eu", Target: key("Database", "ns", "orders"), OnTargetDelete: catalog.RefBlock})
	require.NoError(t, err)
	ttl := 10 * time.Second
	_, err = f.s.AcquireLeader(f.ctx, "server", "a", ttl)
	require.NoError(t, err)
	f.clock.Advance(ttl + time.Second)
	_, err = f.s.AcquireLeader(f.ctx, "server", "b", ttl)
	require.NoError(t, err)
	_, err = f.s.RemovePeerReference(catalog.WithLeaderFence(f.ctx, &catalog.LeaderFence{Name: "server", Holder: "a", Term: 1}), *e)
	require.ErrorIs(t, err, catalog.ErrStaleTerm)
	es, err := f.s.PeerReferences(f.ctx, "")
	require.NoError(t, err)
	assert.Len(t, es, 1, "the edge is kept")
	assert.Equal(t, catalog.NotificationPending, messageOf(t, f, catalog.PeerMsgRegisterBackReference, e.IdempotencyKey).State)
	removed, err := f.s.RemovePeerReference(catalog.WithLeaderFence(f.ctx, &catalog.LeaderFence{Name: "server", Holder: "b", Term: 2}), *e)
	require.NoError(t, err)
	assert.True(t, removed, "the current term removes it")
}
