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
