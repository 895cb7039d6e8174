package apply

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
)

// same reports whether the stored resource already is the desired one.
func same(cur, want *catalog.Resource) bool {
	return mapsEqual(cur.Labels, want.Labels) && mapsEqual(cur.Annotations, want.Annotations) &&
		slices.Equal(cur.Owners, want.Owners) && slices.Equal(cur.References, want.References) &&
		slices.Equal(cur.Finalizers, want.Finalizers) && jsonEqual(cur.Spec, want.Spec) && jsonEqual(cur.Status, want.Status)
}

// sameBody is same for all but the owners, between a stored resource
// and the document that would update it (whose own status, when it has
// none, is the stored one's).
func sameBody(cur *catalog.Resource, d *manifest.Document) bool {
	refs := d.LocalReferences()
	return mapsEqual(cur.Labels, d.Metadata.Labels) && mapsEqual(cur.Annotations, d.Metadata.Annotations) &&
		slices.Equal(cur.References, refs) && slices.Equal(cur.Finalizers, d.Metadata.Finalizers) &&
		jsonEqual(cur.Spec, d.Spec) && (len(d.Status) == 0 || jsonEqual(cur.Status, d.Status))
}

func mapsEqual(a, b map[string]string) bool { return len(a) == len(b) && maps.Equal(a, b) }

func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true // the usual case (both from encoding/json): no decoding
	}
	return bytes.Equal(canonical(a), canonical(b))
}

func canonical(raw json.RawMessage) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// write makes the creates and updates in one transaction, owners first.
// The catalog takes them one at a time (catalog.Resources.WriteEach), so
// a write of tens of thousands of resources holds each stored copy only
// while it is written.
func (e *Engine) write(ctx context.Context, p *plan) error {
	var order []*item
	var visit func(it *item)
	visit = func(it *item) {
		if it.visited {
			return
		}
		it.visited = true
		for _, d := range it.deps {
			visit(d)
		}
		if (it.desired != nil || it.pos != 0) && it.change.Action != Adopted {
			order = append(order, it)
		}
	}
	for _, it := range p.items {
		visit(it)
	}
	if len(order) == 0 {
		return nil
	}
	err := e.st.WriteEach(ctx, len(order), func(i int) (catalog.Write, error) {
		return catalog.Write{Create: order[i].cur == nil, Resource: p.resource(order[i])}, nil
	}, func(i int, r *catalog.Resource) {
		ch := order[i].change
		ch.UID, ch.ResourceVersion, ch.Phase = r.UID, r.ResourceVersion, r.Phase
	})
	if errors.Is(err, catalog.ErrCycle) {
		// Another writer added the other half meanwhile: the catalog's
		// check, inside the write's transaction, refused it.
		return refuse(fmt.Errorf("%w; nothing was applied", err))
	}
	if err != nil {
		var k catalog.Key
		for _, it := range order {
			if strings.Contains(err.Error(), it.key().String()) {
				k = it.key()
				break
			}
		}
		if errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrAlreadyExists) || errors.Is(err, catalog.ErrNotFound) ||
			errors.Is(err, catalog.ErrInvalidTransition) {
			return &ConflictError{Key: k, Err: err, Race: true}
		}
		return fmt.Errorf("nothing was applied: %w", err)
	}
	return nil
}

// adopt returns Scheduled members to Active and gives them their desired
// state. A member that entered Deleting meanwhile is reported skipped.
func (e *Engine) adopt(ctx context.Context, p *plan) error {
	for _, it := range p.adoptions {
		k := it.key()
		r, err := e.st.Undelete(ctx, k, fmt.Sprintf("adopted: back in %s", it.bundle.key()))
		if errors.Is(err, catalog.ErrInvalidTransition) {
			it.change.Action, it.change.Reason = Skipped, "its grace window ended before it could be adopted: it is Deleting; apply again once it is purged"
			it.change.Phase = catalog.PhaseDeleting
			continue
		}
		if err != nil {
			return fmt.Errorf("adopting %s: %w (the resources before it were applied; apply again to finish)", k, err)
		}
		want := p.resource(it)
		want.ResourceVersion = r.ResourceVersion
		if !same(r, want) {
			if r, err = e.st.Update(ctx, want); err != nil {
				return fmt.Errorf("adopting %s: %w (it is Active again; apply again to update its spec)", k, err)
			}
		}
		it.change.ResourceVersion, it.change.Phase = r.ResourceVersion, r.Phase
	}
	return nil
}
