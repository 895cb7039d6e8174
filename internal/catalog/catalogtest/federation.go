package catalogtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// The federation's catalog part: forward edges with their intent in the
// peer outbox, the answer moving the edge, and back-reference stubs that
// hold their target.

func auditActions(t *testing.T, f *fixture, uid string) []string {
	t.Helper()
	es, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: uid})
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Action)
	}
	return out
}

func testPeerReferenceQueuesItsIntentWithTheEdge(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	app := f.create(t, res("App", "ns", "web", nil))
	ref := catalog.PeerReference{Referrer: catalog.ObjectRef{Kind: "App", Namespace: "ns", Name: "web"}, Peer: "eu",
		Target: key("Database", "ns", "orders"), OnTargetDelete: catalog.RefCascade}
	got, err := f.s.AddPeerReference(f.ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, catalog.PeerEdgePending, got.State, "an edge starts Pending: nothing is acknowledged yet")
	assert.Equal(t, app.UID, got.Referrer.UID)
	require.NotEmpty(t, got.IdempotencyKey)

	msgs, err := f.s.PeerMessages(f.ctx, "eu")
	require.NoError(t, err)
	require.Len(t, msgs, 1, "the intent is queued with the edge")
	assert.Equal(t, catalog.PeerMsgRegisterBackReference, msgs[0].Type)
	assert.Equal(t, got.IdempotencyKey, msgs[0].IdempotencyKey)
	assert.Equal(t, catalog.NotificationPending, msgs[0].State)

	again, err := f.s.AddPeerReference(f.ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, got.IdempotencyKey, again.IdempotencyKey, "adding the same edge again returns the stored one")
	msgs, err = f.s.PeerMessages(f.ctx, "")
	require.NoError(t, err)
	assert.Len(t, msgs, 1, "and queues nothing")

	other := ref
	other.OnTargetDelete = catalog.RefBlock
	_, err = f.s.AddPeerReference(f.ctx, other)
	require.ErrorIs(t, err, catalog.ErrConflict)

	missing := ref
	missing.Referrer.Name = "nope"
	_, err = f.s.AddPeerReference(f.ctx, missing)
	require.ErrorIs(t, err, catalog.ErrNotFound)
	bad := ref
	bad.OnTargetDelete = "sometimes"
	_, err = f.s.AddPeerReference(f.ctx, bad)
	require.ErrorIs(t, err, catalog.ErrInvalid)
	msgs, err = f.s.PeerMessages(f.ctx, "")
	require.NoError(t, err)
	assert.Len(t, msgs, 1, "refused edges queue nothing")
	edges, err := f.s.PeerReferences(f.ctx, "")
	require.NoError(t, err)
	assert.Len(t, edges, 1)
	assert.Equal(t, []string{"create", catalog.AuditPeerReference}, auditActions(t, f, app.UID))
}

func testPeerAnswerMovesTheEdgeAndOnlyAnAnswerDoes(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	app := f.create(t, res("App", "ns", "web", nil))
	for _, name := range []string{"orders", "users"} {
		_, err := f.s.AddPeerReference(f.ctx, catalog.PeerReference{Referrer: catalog.ObjectRef{Kind: "App", Namespace: "ns", Name: "web"},
			Peer: "eu", Target: key("Database", "ns", name), OnTargetDelete: catalog.RefBlock})
		require.NoError(t, err)
	}
	claimed, err := f.s.ClaimPeerMessages(f.ctx, "me", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	again, err := f.s.ClaimPeerMessages(f.ctx, "other", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, again, "a claimed message is leased")

	// No answer (the peer could not be reached): the edge stays Pending.
	require.NoError(t, f.s.RetryPeerMessage(f.ctx, claimed[0].ID, claimed[0].Lease, f.clock.Now().Add(time.Second), "connection refused"))
	require.NoError(t, f.s.AnswerPeerMessage(f.ctx, claimed[1].ID, claimed[1].Lease, catalog.PeerAnswer{Accepted: false, Reason: "not accepted"}))
	require.ErrorIs(t, f.s.AnswerPeerMessage(f.ctx, claimed[1].ID, claimed[1].Lease, catalog.PeerAnswer{Accepted: true}), catalog.ErrLeaseLost,
		"an answered message takes no second answer")

	edges, err := f.s.PeerReferences(f.ctx, app.UID)
	require.NoError(t, err)
	require.Len(t, edges, 2)
	byKey := map[string]*catalog.PeerReference{}
	for _, e := range edges {
		byKey[e.IdempotencyKey] = e
	}
	assert.Equal(t, catalog.PeerEdgePending, byKey[claimed[0].IdempotencyKey].State, "no answer is no acknowledgement")
	assert.Equal(t, catalog.PeerEdgeRefused, byKey[claimed[1].IdempotencyKey].State)
	assert.Equal(t, "not accepted", byKey[claimed[1].IdempotencyKey].Reason)

	f.clock.Advance(2 * time.Second)
	retried, err := f.s.ClaimPeerMessages(f.ctx, "me", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, retried, 1, "the unanswered message comes back; the answered one does not")
	assert.Equal(t, claimed[0].ID, retried[0].ID)
	assert.Equal(t, 2, retried[0].Attempts)
	require.ErrorIs(t, f.s.AnswerPeerMessage(f.ctx, claimed[0].ID, claimed[0].Lease, catalog.PeerAnswer{Accepted: true}), catalog.ErrLeaseLost,
		"an older claim is fenced off")
	require.NoError(t, f.s.AnswerPeerMessage(f.ctx, retried[0].ID, retried[0].Lease, catalog.PeerAnswer{Accepted: true}))
	edges, err = f.s.PeerReferences(f.ctx, app.UID)
	require.NoError(t, err)
	for _, e := range edges {
		if e.IdempotencyKey == claimed[0].IdempotencyKey {
			assert.Equal(t, catalog.PeerEdgeAcknowledged, e.State)
		}
	}
	assert.Contains(t, auditActions(t, f, app.UID), catalog.AuditPeerAcknowledged)
	assert.Contains(t, auditActions(t, f, app.UID), catalog.AuditPeerRefused)
}

func testBackReferenceHoldsItsTarget(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	db := f.create(t, res("Database", "ns", "orders", nil))
	free := f.create(t, res("Database", "ns", "free", nil))
	stub := catalog.BackReference{Peer: "us", Referrer: catalog.ObjectRef{Kind: "App", Namespace: "ns", Name: "web", UID: "u-1"},
		Target: db.Key(), OnTargetDelete: catalog.RefAllowDangling, IdempotencyKey: "k1"}
	got, err := f.s.RegisterBackReference(f.ctx, stub)
	require.NoError(t, err)
	assert.Equal(t, db.Key(), got.Target)
	replay, err := f.s.RegisterBackReference(f.ctx, stub)
	require.NoError(t, err)
	assert.Equal(t, got.CreatedAt, replay.CreatedAt, "a replay returns the stored stub")
	assert.Equal(t, []string{"create", catalog.AuditBackReference}, auditActions(t, f, db.UID), "a replay writes nothing")
	// The same key for another stub is no replay: refused, nothing stored.
	for name, other := range map[string]catalog.BackReference{
		"target":         {Target: free.Key()},
		"referrer":       {Referrer: catalog.ObjectRef{Kind: "App", Namespace: "ns", Name: "web", UID: "u-2"}},
		"onTargetDelete": {OnTargetDelete: catalog.RefBlock},
	} {
		b := stub
		if other.Target != (catalog.Key{}) {
			b.Target = other.Target
		}
		if other.Referrer.UID != "" {
			b.Referrer = other.Referrer
		}
		if other.OnTargetDelete != "" {
			b.OnTargetDelete = other.OnTargetDelete
		}
		_, err = f.s.RegisterBackReference(f.ctx, b)
		require.ErrorIs(t, err, catalog.ErrInvalid, "the key with another %s", name)
	}
	assert.Equal(t, []string{"create"}, auditActions(t, f, free.UID), "a refused key writes nothing")
	bs, err := f.s.BackReferences(f.ctx, db.Key())
	require.NoError(t, err)
	require.Len(t, bs, 1)

	// Even an allowDangling stub holds it: deletion across peers is not
	// implemented, and what a peer would do is unknown, never absent.
	_, err = f.s.Delete(f.ctx, db.Key(), catalog.DeleteOptions{Force: true})
	requireTransition(t, err, catalog.PhaseActive, catalog.PhaseDeleting)
	assert.Contains(t, err.Error(), "peer us")
	_, err = f.s.Schedule(f.ctx, db.Key(), catalog.ScheduleOptions{Delay: time.Hour})
	requireTransition(t, err, catalog.PhaseActive, catalog.PhaseScheduled)
	purged, err := f.s.CollectBatch(f.ctx, []catalog.CollectItem{
		{UID: db.UID, ResourceVersion: db.ResourceVersion, Reason: "x"},
		{UID: free.UID, ResourceVersion: free.ResourceVersion, Reason: "x"}})
	require.NoError(t, err)
	assert.Equal(t, []string{free.UID}, purged, "the collector leaves a resource a peer references")
	cur, err := f.s.Get(f.ctx, db.Key())
	require.NoError(t, err)
	assert.Equal(t, catalog.PhaseActive, cur.Phase)

	_, err = f.s.RegisterBackReference(f.ctx, catalog.BackReference{Peer: "us", Referrer: stub.Referrer, Target: key("Database", "ns", "nope"),
		OnTargetDelete: catalog.RefBlock, IdempotencyKey: "k2"})
	require.ErrorIs(t, err, catalog.ErrNotFound)
	gone := f.create(t, res("Database", "ns", "going", nil))
	_, err = f.s.Delete(f.ctx, gone.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	_, err = f.s.RegisterBackReference(f.ctx, catalog.BackReference{Peer: "us", Referrer: stub.Referrer, Target: gone.Key(),
		OnTargetDelete: catalog.RefBlock, IdempotencyKey: "k3"})
	require.ErrorIs(t, err, catalog.ErrInvalidTransition, "a Deleting target takes no new stub")
	bs, err = f.s.BackReferences(f.ctx, catalog.Key{})
	require.NoError(t, err)
	assert.Len(t, bs, 1)
}

// deliverAll claims every due peer message and answers it accepted.
func deliverAll(t *testing.T, f *fixture) []*catalog.PeerMessage {
	t.Helper()
	msgs, err := f.s.ClaimPeerMessages(f.ctx, "test", time.Minute, 100)
	require.NoError(t, err)
	for _, m := range msgs {
		require.NoError(t, f.s.AnswerPeerMessage(f.ctx, m.ID, m.Lease, catalog.PeerAnswer{Accepted: true}))
	}
	return msgs
}

func pendingOfType(t *testing.T, f *fixture, typ catalog.PeerMessageType) []*catalog.PeerMessage {
	t.Helper()
	msgs, err := f.s.PeerMessages(f.ctx, "")
	require.NoError(t, err)
	var out []*catalog.PeerMessage
	for _, m := range msgs {
		if m.Type == typ && m.State == catalog.NotificationPending {
			out = append(out, m)
		}
	}
	return out
}

func testPurgedReferrerDropsItsPeerEdges(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	add := func(name, peer string) *catalog.PeerReference {
		f.create(t, res("App", "ns", name, nil))
		e, err := f.s.AddPeerReference(f.ctx, catalog.PeerReference{Referrer: catalog.ObjectRef{Kind: "App", Namespace: "ns", Name: name},
			Peer: peer, Target: key("Database", "ns", "orders"), OnTargetDelete: catalog.RefBlock})
		require.NoError(t, err)
		return e
	}
	// Purge: an acknowledged edge is dropped on its peer.
	sent := add("sent", "eu")
	require.Len(t, deliverAll(t, f), 1)
	_, err := f.s.Delete(f.ctx, key("App", "ns", "sent"), catalog.DeleteOptions{})
	require.NoError(t, err)
	require.NoError(t, f.s.Purge(f.ctx, key("App", "ns", "sent"), catalog.PurgeOptions{}))
	drops := pendingOfType(t, f, catalog.PeerMsgDropBackReference)
	require.Len(t, drops, 1, "the purge queues the drop in its transaction")
	assert.Equal(t, sent.IdempotencyKey, drops[0].IdempotencyKey)
	assert.Equal(t, "eu", drops[0].Peer)
	edges, err := f.s.PeerReferences(f.ctx, "")
	require.NoError(t, err)
	assert.Empty(t, edges, "the edge goes with its referrer")
	assert.Contains(t, auditActions(t, f, sent.Referrer.UID), catalog.AuditPeerReferenceDropped)
	deliverAll(t, f)

	// The collector's purge does the same; an intent never sent is
	// cancelled instead (it made no stub), and a refused edge sends nothing.
	unsent := add("unsent", "eu")
	refused := add("refused", "asia")
	msgs, err := f.s.ClaimPeerMessages(f.ctx, "test", time.Minute, 100)
	require.NoError(t, err)
	for _, m := range msgs {
		if m.Peer == "asia" {
			require.NoError(t, f.s.AnswerPeerMessage(f.ctx, m.ID, m.Lease, catalog.PeerAnswer{Reason: "no such target"}))
		} else {
			require.NoError(t, f.s.RetryPeerMessage(f.ctx, m.ID, m.Lease, time.Now().Add(time.Hour), "unreachable"))
		}
	}
	never := add("never", "eu")
	var items []catalog.CollectItem
	for _, e := range []*catalog.PeerReference{unsent, refused, never} {
		r, err := f.s.Get(f.ctx, key("App", "ns", e.Referrer.Name))
		require.NoError(t, err)
		items = append(items, catalog.CollectItem{UID: r.UID, ResourceVersion: r.ResourceVersion, Reason: "x"})
	}
	purged, err := f.s.CollectBatch(f.ctx, items)
	require.NoError(t, err)
	require.Len(t, purged, 3)
	drops = pendingOfType(t, f, catalog.PeerMsgDropBackReference)
	require.Len(t, drops, 1, "only the edge whose intent may have reached its peer is dropped there")
	assert.Equal(t, unsent.IdempotencyKey, drops[0].IdempotencyKey)
	regs := pendingOfType(t, f, catalog.PeerMsgRegisterBackReference)
	require.Len(t, regs, 1, "an intent already tried stays (its answer may be on its way); one never sent is cancelled")
	assert.Equal(t, unsent.IdempotencyKey, regs[0].IdempotencyKey)
	edges, err = f.s.PeerReferences(f.ctx, "")
	require.NoError(t, err)
	assert.Empty(t, edges)
}

func testDroppedBackReferenceFreesItsTarget(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	db := f.create(t, res("Database", "ns", "orders", nil))
	stub := catalog.BackReference{Peer: "us", Referrer: catalog.ObjectRef{Kind: "App", Namespace: "ns", Name: "web", UID: "u-1"},
		Target: db.Key(), OnTargetDelete: catalog.RefBlock, IdempotencyKey: "k1"}
	_, err := f.s.RegisterBackReference(f.ctx, stub)
	require.NoError(t, err)

	other := stub
	other.Peer = "asia"
	dropped, err := f.s.DropBackReference(f.ctx, other)
	require.NoError(t, err)
	assert.False(t, dropped, "a peer drops only its own stubs")
	wrong := stub
	wrong.Referrer.UID = "u-2"
	_, err = f.s.DropBackReference(f.ctx, wrong)
	require.ErrorIs(t, err, catalog.ErrInvalid)
	_, err = f.s.Delete(f.ctx, db.Key(), catalog.DeleteOptions{})
	requireTransition(t, err, catalog.PhaseActive, catalog.PhaseDeleting)

	dropped, err = f.s.DropBackReference(f.ctx, stub)
	require.NoError(t, err)
	assert.True(t, dropped)
	dropped, err = f.s.DropBackReference(f.ctx, stub)
	require.NoError(t, err)
	assert.False(t, dropped, "a replay changes nothing")
	bs, err := f.s.BackReferences(f.ctx, catalog.Key{})
	require.NoError(t, err)
	assert.Empty(t, bs)
	_, err = f.s.Delete(f.ctx, db.Key(), catalog.DeleteOptions{})
	require.NoError(t, err, "nothing holds it now")
	es, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: "Database"})
	require.NoError(t, err)
	n := 0
	for _, e := range es {
		if e.Action == catalog.AuditBackReferenceDropped {
			n++
			assert.Equal(t, catalog.ActorPeerPrefix+"us", e.Actor)
		}
	}
	assert.Equal(t, 1, n)
	assert.Contains(t, auditActions(t, f, db.UID), catalog.AuditBackReferenceDropped, "filed under the target's UID")
}
