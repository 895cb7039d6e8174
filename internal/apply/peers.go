package apply

import (
	"context"
	"fmt"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// References to resources on peers (a reference with peer:,
// docs/federation.md). The target is in another catalog, so the plan
// checks only what this one knows: the peer is configured, and an edge
// already stored has the same onTargetDelete. The edges are added after
// the write (catalog.Federation.AddPeerReference: the edge and its
// intent in the outbox, in one transaction); adding one again is a
// no-op, so applying again finishes an apply a crash interrupted.

// PeerReferences is what apply needs of the catalog's federation.
type PeerReferences interface {
	AddPeerReference(ctx context.Context, ref catalog.PeerReference) (*catalog.PeerReference, error)
	PeerReferences(ctx context.Context, referrerUID string) ([]*catalog.PeerReference, error)
}

// planPeerReferences checks it's references to peers and keeps them.
func (e *Engine) planPeerReferences(ctx context.Context, it *item) error {
	d := it.doc
	refs := d.PeerReferences()
	if len(refs) == 0 {
		return nil
	}
	var stored []*catalog.PeerReference
	if it.cur != nil && e.fed != nil {
		var err error
		if stored, err = e.fed.PeerReferences(ctx, it.cur.UID); err != nil {
			return err
		}
	}
	n := 0
	for i, r := range d.References {
		field := fmt.Sprintf("references[%d]", i)
		if r.Peer == "" {
			continue
		}
		ref := refs[n]
		n++
		if it.readOnly {
			return refuse(d.Errorf(field, "apply does not change a %s: it takes no reference to a peer", d.Kind))
		}
		if e.fed == nil || e.peers == nil || !e.peers(r.Peer) {
			return refuse(d.Errorf(field+".peer", "peer %s is not configured (the peers of --federation)", termtext.Quote(r.Peer)))
		}
		for _, s := range stored {
			if s.Peer == ref.Peer && s.Target == ref.Target && s.OnTargetDelete != ref.OnTargetDelete {
				return refuse(d.Errorf(field+".onTargetDelete", "%s on peer %s is referenced with onTargetDelete %s already; a reference to a peer cannot change its policy",
					ref.Target, termtext.Quote(ref.Peer), s.OnTargetDelete))
			}
		}
	}
	it.peerRefs = refs
	return nil
}

// addPeerReferences adds the planned forward edges of the resources
// written (or unchanged), each with its intent in the outbox.
func (e *Engine) addPeerReferences(ctx context.Context, p *plan) error {
	for _, it := range p.items {
		if len(it.peerRefs) == 0 || it.skipped || it.change.Action == Skipped {
			continue
		}
		for _, ref := range it.peerRefs {
			if _, err := e.fed.AddPeerReference(ctx, ref); err != nil {
				return fmt.Errorf("%s: reference to %s on peer %s: %w (the resources were applied; apply again to add it)",
					it.change.Key(), ref.Target, termtext.Quote(ref.Peer), err)
			}
		}
	}
	return nil
}
