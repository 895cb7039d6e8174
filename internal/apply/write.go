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
)

// same reports whether the stored resource already is the desired one.
func same(cur, want *catalog.Resource) bool {
	return mapsEqual(cur.Labels, want.Labels) && mapsEqual(cur.Annotations, want.Annotations) &&
		slices.Equal(cur.Owners, want.Owners) && slices.Equal(cur.References, want.References) &&
		slices.Equal(cur.Finalizers, want.Finalizers) && jsonEqual(cur.Spec, want.Spec) && jsonEqual(cur.Status, want.Status)
}

func mapsEqual(a, b map[string]string) bool { return len(a) == len(b) && maps.Equal(a, b) }

func jsonEqual(a, b json.RawMessage) bool {
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
func (e *Engine) write(ctx context.Context, p *plan) error {
	var ws []catalog.Write
	done := map[*item]bool{}
	var visit func(it *item)
	visit = func(it *item) {
		if done[it] {
			return
		}
		done[it] = true
		for _, d := range it.deps {
			visit(d)
		}
		if it.desired != nil && it.change.Action != Adopted {
			ws = append(ws, catalog.Write{Create: it.cur == nil, Resource: it.desired})
		}
	}
	for _, it := range p.items {
		visit(it)
	}
	if len(ws) == 0 {
		return nil
	}
	out, err := e.st.WriteBatch(ctx, ws)
	if errors.Is(err, catalog.ErrCycle) {
		// Another writer added the other half meanwhile: the catalog's
		// check, inside the write's transaction, refused it.
		return refuse(fmt.Errorf("%w; nothing was applied", err))
	}
	if err != nil {
		var k catalog.Key
		for _, w := range ws {
			if strings.Contains(err.Error(), w.Resource.Key().String()) {
				k = w.Resource.Key()
				break
			}
		}
		if errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrAlreadyExists) || errors.Is(err, catalog.ErrNotFound) ||
			errors.Is(err, catalog.ErrInvalidTransition) {
			return &ConflictError{Key: k, Err: err, Race: true}
		}
		return fmt.Errorf("nothing was applied: %w", err)
	}
	for _, r := range out {
		it := p.byKey[r.Key()]
		it.change.UID, it.change.ResourceVersion, it.change.Phase = r.UID, r.ResourceVersion, r.Phase
	}
	return nil
}

// adopt returns Scheduled members to Active and gives them their desired
// state. A member that entered Deleting meanwhile is reported skipped.
func (e *Engine) adopt(ctx context.Context, p *plan) error {
	for _, it := range p.adoptions {
		k := it.doc.Key()
		r, err := e.st.Undelete(ctx, k, fmt.Sprintf("adopted: back in %s", it.bundle.doc.Key()))
		if errors.Is(err, catalog.ErrInvalidTransition) {
			it.change.Action, it.change.Reason = Skipped, "its grace window ended before it could be adopted: it is Deleting; apply again once it is purged"
			it.change.Phase = catalog.PhaseDeleting
			continue
		}
		if err != nil {
			return fmt.Errorf("adopting %s: %w (the resources before it were applied; apply again to finish)", k, err)
		}
		want := it.desired
		want.ResourceVersion = r.ResourceVersion
		want.Annotations = maps.Clone(want.Annotations)
		if !same(r, want) {
			if r, err = e.st.Update(ctx, want); err != nil {
				return fmt.Errorf("adopting %s: %w (it is Active again; apply again to update its spec)", k, err)
			}
		}
		it.change.ResourceVersion, it.change.Phase = r.ResourceVersion, r.Phase
	}
	return nil
}
