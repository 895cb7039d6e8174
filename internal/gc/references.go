package gc

import (
	"context"
	"errors"

	"github.com/lethehq/lethe/internal/catalog"
)

// ReferenceState is one of a resource's references with the state of its
// target: Dangling when the target is gone (no resource has its key, or
// the reference names a UID and the resource with that key has another).
// allowDangling references are the ones that stay dangling: the other
// policies act when their target is deleted.
type ReferenceState struct {
	catalog.Reference
	Dangling bool `json:"dangling"`
	// TargetPhase is the target's phase, when it exists.
	TargetPhase catalog.Phase `json:"targetPhase,omitempty"`
}

// Getter reads a resource by key.
type Getter interface {
	Get(ctx context.Context, k catalog.Key) (*catalog.Resource, error)
}

// References returns r's references, in order, each with its target's
// state (one read per reference).
func References(ctx context.Context, st Getter, r *catalog.Resource) ([]ReferenceState, error) {
	out := make([]ReferenceState, 0, len(r.References))
	for _, ref := range r.References {
		s := ReferenceState{Reference: ref}
		t, err := st.Get(ctx, catalog.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name})
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			s.Dangling = true
		case err != nil:
			return nil, err
		case ref.UID != "" && t.UID != ref.UID:
			s.Dangling = true // the key now names another resource
		default:
			s.TargetPhase = t.Phase
		}
		out = append(out, s)
	}
	return out, nil
}

// OwnerState is one of a resource's owner references with its owner's
// state: Gone when no resource has that UID any more (purged; the
// collector drops the edge, or deletes the dependent, on its next pass).
type OwnerState struct {
	catalog.OwnerRef
	Gone bool `json:"gone"`
	// Phase is the owner's phase, when it exists.
	Phase catalog.Phase `json:"phase,omitempty"`
}

// UIDGetter reads a resource by UID.
type UIDGetter interface {
	GetByUID(ctx context.Context, uid string) (*catalog.Resource, error)
}

// Owners returns r's owner references, in order, each with its owner's
// state (one read per owner).
func Owners(ctx context.Context, st UIDGetter, r *catalog.Resource) ([]OwnerState, error) {
	out := make([]OwnerState, 0, len(r.Owners))
	for _, o := range r.Owners {
		s := OwnerState{OwnerRef: o}
		x, err := st.GetByUID(ctx, o.UID)
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			s.Gone = true
		case err != nil:
			return nil, err
		default:
			s.Phase = x.Phase
		}
		out = append(out, s)
	}
	return out, nil
}
