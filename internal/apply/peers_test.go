package apply_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
)

const (
	webWithPeers = `kind: App
metadata: {name: web, namespace: shop}
references:
- {kind: Database, namespace: shop, name: orders, peer: eu, onTargetDelete: block}
- {kind: Database, namespace: shop, name: users, peer: eu, onTargetDelete: block}
`
	webWithOnePeer = `kind: App
metadata: {name: web, namespace: shop}
references:
- {kind: Database, namespace: shop, name: users, peer: eu, onTargetDelete: block}
`
)

func pendingDrops(t *testing.T, st catalog.Store) []*catalog.PeerMessage {
	t.Helper()
	msgs, err := st.PeerMessages(ctx, "eu")
	require.NoError(t, err)
	var out []*catalog.PeerMessage
	for _, m := range msgs {
		if m.Type == catalog.PeerMsgDropBackReference && m.State == catalog.NotificationPending {
			out = append(out, m)
		}
	}
	return out
}

// TestApplyRemovesAPeerReferenceItsDocumentNoLongerHas: applying a
// resource again without one of its references to a peer removes that
// edge and queues the drop for the peer (a dry run reports it and changes
// nothing); the edges it keeps stay as they are.
func TestApplyRemovesAPeerReferenceItsDocumentNoLongerHas(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e, err := apply.New(&apply.Config{Store: st, Now: clock.Now, Federation: st, Peers: func(n string) bool { return n == "eu" }})
		require.NoError(t, err)
		_, err = e.Apply(ctx, docs(t, webWithPeers), apply.Options{})
		require.NoError(t, err)
		// Both registrations are sent and acknowledged.
		msgs, err := st.ClaimPeerMessages(ctx, "test", time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, msgs, 2)
		for _, m := range msgs {
			require.NoError(t, st.AnswerPeerMessage(ctx, m.ID, m.Lease, catalog.PeerAnswer{Accepted: true}))
		}
		web := get(t, st, "App", "shop", "web")
		before, err := st.PeerReferences(ctx, web.UID)
		require.NoError(t, err)
		require.Len(t, before, 2)

		dry, err := e.Apply(ctx, docs(t, webWithOnePeer), apply.Options{DryRun: true})
		require.NoError(t, err)
		require.Len(t, dry.Changes, 1)
		assert.Equal(t, apply.Unchanged, dry.Changes[0].Action)
		assert.Equal(t, []apply.PeerRef{{Peer: "eu", Target: catalog.Key{Kind: "Database", Namespace: "shop", Name: "orders"}, State: catalog.PeerEdgeAcknowledged}},
			dry.Changes[0].PeerReferencesRemoved, "the dry run shows the removal")
		assert.Equal(t, "1 unchanged, 1 reference to a peer removed", dry.Summary())
		after, err := st.PeerReferences(ctx, web.UID)
		require.NoError(t, err)
		assert.Equal(t, before, after, "a dry run removes nothing")
		assert.Empty(t, pendingDrops(t, st))

		res, err := e.Apply(ctx, docs(t, webWithOnePeer), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, dry.Changes[0].PeerReferencesRemoved, res.Changes[0].PeerReferencesRemoved)
		after, err = st.PeerReferences(ctx, web.UID)
		require.NoError(t, err)
		require.Len(t, after, 1, "the reference the document dropped is removed")
		assert.Equal(t, "users", after[0].Target.Name)
		assert.Equal(t, before[1], after[0], "the kept one is as it was")
		drops := pendingDrops(t, st)
		require.Len(t, drops, 1, "its peer is told")
		assert.Equal(t, before[0].IdempotencyKey, drops[0].IdempotencyKey)

		again, err := e.Apply(ctx, docs(t, webWithOnePeer), apply.Options{})
		require.NoError(t, err)
		assert.Empty(t, again.Changes[0].PeerReferencesRemoved, "applying again removes nothing more")
		assert.Len(t, pendingDrops(t, st), 1)
		assert.Equal(t, "1 unchanged", again.Summary())
	})
}
