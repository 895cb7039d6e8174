package gc_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// heldByPeer gives r a back-reference stub from peer "us", as the
// federation's PeerService stores one.
func (f *fixture) heldByPeer(r *catalog.Resource) {
	f.t.Helper()
	_, err := f.st.RegisterBackReference(f.ctx, catalog.BackReference{Peer: "us", IdempotencyKey: "k-" + r.Name,
		Referrer: catalog.ObjectRef{Kind: "App", Namespace: "shop", Name: "web", UID: "0190-aa"},
		Target:   r.Key(), OnTargetDelete: catalog.RefCascade})
	require.NoError(f.t, err)
}

// TestCascadeNeverDeletesAResourceAPeerReferences: deletion across peers
// is not implemented, so a resource a peer holds a back-reference to is
// never deleted, directly or by a cascade; a Foreground owner waits for
// it with DeletionStuck (HeldByPeer) naming the peer, never purged.
func TestCascadeNeverDeletesAResourceAPeerReferences(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		owner := f.res("Account", "owner")
		dep := f.res("Database", "dep", ownedBy(owner, true))
		f.heldByPeer(dep)

		_, err := f.c.Delete(f.ctx, dep.Key(), gc.DeleteOptions{})
		require.ErrorIs(t, err, catalog.ErrInvalidTransition)
		assert.Contains(t, err.Error(), "on peer us")

		require.Equal(t, gc.OutcomeStuck, f.del(owner, gc.Foreground))
		f.requirePhase(dep, catalog.PhaseActive)
		x := f.requirePhase(owner, catalog.PhaseDeleting)
		require.NotNil(t, stuck(x), "the owner says what it waits for")
		assert.Equal(t, gc.ReasonHeldByPeer, stuck(x).Reason)
		assert.Equal(t, "Account/prod/owner waits for Database/prod/dep, which 1 resource(s) on other peers reference "+
			"(first: App/shop/web on peer us, cascade); deletion across peers is not implemented yet", stuck(x).Message)

		e, err := f.c.Explain(f.ctx, owner.Key())
		require.NoError(t, err)
		assert.True(t, e.Stuck)
	})
}
