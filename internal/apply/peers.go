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
// already stored has the same onTargetDelete. A stored edge that the
// document no longer has is removed (its peer is told to drop its stub);
// a dry run reports it. The edges are added and removed after the write
// (catalog.Federation.AddPeerReference and RemovePeerReference: the edge
// and its message in the outbox, in one transaction); each is idempotent,
// so applying again finishes an apply a crash interrupted.

// PeerReferences is what apply needs of the catalog's federation.
type PeerReferences interface {
	AddPeerReference(ctx context.Context, ref catalog.PeerReference) (*catalog.PeerReference, error)
	PeerReferencesOf(ctx context.Context, referrerUIDs []string) ([]*catalog.PeerReference, error)
	PeerReferrers(ctx context.Context) ([]string, error)
	RemovePeerReference(ctx context.Context, ref catalog.PeerReference) (bool, error)
}

// PeerRef names a reference to a resource on a peer, in a Change.
type PeerRef struct {
	Peer   string      `json:"peer"`
	Target catalog.Key `json:"target"`
	// State is the stored edge's (Pending, Acknowledged, Refused).
	State catalog.PeerEdgeState `json:"state,omitempty"`
}

// peerPlan is an item's part in references to peers.
type peerPlan struct {
	// refs are the document's references to resources on peers: forward
	// edges added once the resource is written; drops the stored ones it
	// no longer has, removed then; stored the stored ones, read with the
	// resource, until it is planned.
	refs          []catalog.PeerReference
	drops, stored []*catalog.PeerReference
}

// peerOf is it's peerPlan, made when first needed.
func (it *item) peerOf() *peerPlan {
	if it.peer == nil {
		it.peer = &peerPlan{}
	}
	return it.peer
}

// readPeerReferences reads the stored forward edges of the stored
// resources of items, kept only on the items that have some. The
// referrers that have edges are read once per apply (p.referrers), so a
// chunk of resources without any costs no query.
func (e *Engine) readPeerReferences(ctx context.Context, p *plan, items []*item) error {
	if e.fed == nil {
		return nil
	}
	if p.referrers == nil {
		uids, err := e.fed.PeerReferrers(ctx)
		if err != nil {
			return err
		}
		p.referrers = make(map[string]bool, len(uids))
		for _, u := range uids {
			p.referrers[u] = true
		}
	}
	byUID := map[string]*item{}
	var uids []string
	for _, it := range items {
		if it.cur != nil && p.referrers[it.cur.UID] {
			byUID[it.cur.UID] = it
			uids = append(uids, it.cur.UID)
		}
	}
	if len(uids) == 0 {
		return nil
	}
	edges, err := e.fed.PeerReferencesOf(ctx, uids)
	if err != nil {
		return err
	}
	for _, s := range edges {
		if it := byUID[s.Referrer.UID]; it != nil {
			pp := it.peerOf()
			pp.stored = append(pp.stored, s)
		}
	}
	return nil
}

// planPeerReferences checks it's references to peers and keeps them, and
// the stored edges its document no longer has (to remove).
func (e *Engine) planPeerReferences(it *item) error {
	d := it.doc
	refs := d.PeerReferences()
	var stored []*catalog.PeerReference
	if it.peer != nil {
		stored, it.peer.stored = it.peer.stored, nil
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
	if len(refs) > 0 {
		it.peerOf().refs = refs
	}
	if it.readOnly {
		return nil // apply does not change it: its edges stay
	}
	for _, s := range stored {
		kept := false
		for _, ref := range refs {
			if s.Peer == ref.Peer && s.Target == ref.Target {
				kept = true
				break
			}
		}
		if !kept {
			pp := it.peerOf()
			pp.drops = append(pp.drops, s)
		}
	}
	return nil
}

// reportPeerDrops puts the planned removals in the item's change, unless
// nothing is written for it (the sync filter).
func (it *item) reportPeerDrops() {
	if it.peer == nil {
		return
	}
	if it.skipped || it.change.Action == Skipped {
		it.peer.drops = nil
		return
	}
	for _, s := range it.peer.drops {
		it.change.PeerReferencesRemoved = append(it.change.PeerReferencesRemoved, PeerRef{Peer: s.Peer, Target: s.Target, State: s.State})
	}
}

// syncPeerReferences removes the stored forward edges the documents no
// longer have and adds the planned ones, for the resources written (or
// unchanged), each with its message in the outbox.
func (e *Engine) syncPeerReferences(ctx context.Context, p *plan) error {
	for _, it := range p.items {
		if it.peer == nil {
			continue
		}
		if it.skipped || it.change.Action == Skipped {
			it.change.PeerReferencesRemoved = nil // left as it is (adoption found it Deleting)
			continue
		}
		for _, s := range it.peer.drops {
			if _, err := e.fed.RemovePeerReference(ctx, *s); err != nil {
				return fmt.Errorf("%s: removing the reference to %s on peer %s: %w (the resources were applied; apply again to remove it)",
					it.change.Key(), s.Target, termtext.Quote(s.Peer), err)
			}
		}
		for _, ref := range it.peer.refs {
			if _, err := e.fed.AddPeerReference(ctx, ref); err != nil {
				return fmt.Errorf("%s: reference to %s on peer %s: %w (the resources were applied; apply again to add it)",
					it.change.Key(), ref.Target, termtext.Quote(ref.Peer), err)
			}
		}
	}
	return nil
}
