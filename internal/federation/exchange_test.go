package federation_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/federation"
)

func TestReferenceToAPeerStoresAStubThereThroughIntentAndAcknowledgement(t *testing.T) {
	onPairs(t, func(t *testing.T, target string) {
		w := newWorld(t, worldOpts{targetDriver: target, euAccepts: true})
		ref := w.reference(t, "orders")
		assert.Empty(t, w.stubs(t), "nothing reaches eu before the outbox is delivered")

		require.Equal(t, 1, w.dispatch(t))
		e := w.edge(t)
		assert.Equal(t, catalog.PeerEdgeAcknowledged, e.State)
		bs := w.stubs(t)
		require.Len(t, bs, 1)
		assert.Equal(t, "us", bs[0].Peer)
		assert.Equal(t, ref.Referrer, bs[0].Referrer)
		assert.Equal(t, catalog.RefCascade, bs[0].OnTargetDelete)
		assert.Equal(t, ref.IdempotencyKey, bs[0].IdempotencyKey)
		assert.Zero(t, w.dispatch(t), "a delivered message is not sent again")

		// The stub holds its target: deletion across peers is not
		// implemented, so eu refuses rather than forget the referrer.
		_, err := w.eu.store.Delete(context.Background(), catalog.Key{Kind: "Database", Namespace: "shop", Name: "orders"}, catalog.DeleteOptions{Force: true})
		require.ErrorIs(t, err, catalog.ErrInvalidTransition)
		assert.Contains(t, err.Error(), "on peer us")

		es, err := w.eu.store.ListAudit(context.Background(), catalog.AuditFilter{Kind: "Database", Name: "orders"})
		require.NoError(t, err)
		require.Len(t, es, 2)
		assert.Equal(t, catalog.AuditBackReference, es[1].Action)
		assert.Equal(t, "peer:us", es[1].Actor)
	})
}

func TestPeerThatDoesNotAcceptTheReferrerStoresNoStubAndTheEdgeStaysPending(t *testing.T) {
	onPairs(t, func(t *testing.T, target string) {
		w := newWorld(t, worldOpts{targetDriver: target, euAccepts: false})
		w.reference(t, "orders")
		assert.Zero(t, w.dispatch(t), "a refused caller gets no answer")
		assert.Equal(t, catalog.PeerEdgePending, w.edge(t).State, "no answer is no acknowledgement")
		assert.Empty(t, w.stubs(t))
		assert.Contains(t, w.lastError(t), `peer eu does not accept back-references from peer us`)
	})
}

func TestCertificateThatDoesNotNameItsPeerIsRefused(t *testing.T) {
	// us presents a certificate the CA signed for another name: eu
	// accepts us, but not someone else speaking as us.
	w := newWorld(t, worldOpts{targetDriver: "sqlite", euAccepts: true, usCertNames: []string{"mallory"}})
	w.reference(t, "orders")
	assert.Zero(t, w.dispatch(t))
	assert.Equal(t, catalog.PeerEdgePending, w.edge(t).State)
	assert.Empty(t, w.stubs(t))
	assert.Contains(t, w.lastError(t), `the client certificate does not name peer us`)
}

func TestPeerWhoseCertificateDoesNotNameItIsNotTrusted(t *testing.T) {
	// eu's server presents a certificate for another name: us does not
	// deliver to it.
	w := newWorld(t, worldOpts{targetDriver: "sqlite", euAccepts: true, euCertNames: []string{"mallory"}})
	w.reference(t, "orders")
	assert.Zero(t, w.dispatch(t))
	assert.Equal(t, catalog.PeerEdgePending, w.edge(t).State)
	assert.Empty(t, w.stubs(t))
	assert.Contains(t, w.lastError(t), "certificate is valid for mallory, not eu")
}

func TestUnreachablePeerLeavesTheEdgePendingUntilItAnswers(t *testing.T) {
	onPairs(t, func(t *testing.T, target string) {
		w := newWorld(t, worldOpts{targetDriver: target, euAccepts: true, euDown: true})
		w.reference(t, "orders")
		assert.Zero(t, w.dispatch(t))
		assert.Equal(t, catalog.PeerEdgePending, w.edge(t).State, "an unreachable peer is unknown, never a refusal or an acknowledgement")
		assert.NotEmpty(t, w.lastError(t))
		assert.Empty(t, w.stubs(t))

		serve(t, w.eu, w.euLis) // the partition heals
		require.Equal(t, 1, w.dispatch(t))
		assert.Equal(t, catalog.PeerEdgeAcknowledged, w.edge(t).State)
		assert.Len(t, w.stubs(t), 1)
		ms, err := w.us.store.PeerMessages(context.Background(), "eu")
		require.NoError(t, err)
		assert.Equal(t, 2, ms[0].Attempts)
	})
}

func TestReferenceToAMissingTargetIsRefusedWithTheReason(t *testing.T) {
	onPairs(t, func(t *testing.T, target string) {
		w := newWorld(t, worldOpts{targetDriver: target, euAccepts: true})
		w.reference(t, "payments")
		require.Equal(t, 1, w.dispatch(t), "a refusal is an answer")
		e := w.edge(t)
		assert.Equal(t, catalog.PeerEdgeRefused, e.State)
		assert.Contains(t, e.Reason, "Database/shop/payments")
		assert.Contains(t, e.Reason, "not found")
		assert.Empty(t, w.stubs(t))
	})
}

func TestDispatcherRunDeliversWhatIsQueuedWhileItRuns(t *testing.T) {
	w := newWorld(t, worldOpts{targetDriver: "sqlite", euAccepts: true})
	d := federation.NewDispatcher(w.us.cfg, w.us.store, "us-1")
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, 20*time.Millisecond) }()
	w.reference(t, "orders")
	require.Eventually(t, func() bool {
		es, err := w.us.store.PeerReferences(context.Background(), "")
		return err == nil && len(es) == 1 && es[0].State == catalog.PeerEdgeAcknowledged
	}, 20*time.Second, 20*time.Millisecond)
	assert.Len(t, w.stubs(t), 1)
	cancel()
	require.NoError(t, <-done, "Run ends cleanly when its context does")
}
