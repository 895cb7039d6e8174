package apply

import (
	"fmt"
	"maps"
	"slices"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/termtext"
)

// What lethe get prints of a resource pending deletion carries fields
// that Lethe set: the lethe.io/deletion-scheduled-at annotation
// (Scheduled, and Deleting after it) and lethe.io/ finalizers
// (Deleting). As kubectl apply ignores server-set fields that are what
// the server holds, apply takes each back when the stored resource has
// it as the document gives it, and refuses it otherwise (ReadOnlyError:
// exit 2, nothing written): a manifest cannot schedule or finalize a
// resource. A document that is the stored resource, these fields
// included, is reported unchanged whatever the resource's phase (asStored);
// the sync filter skips one that differs.

// letheFieldsErr is the refusal of the first field of it's document that
// Lethe sets and cur (the stored resource, nil when there is none) does
// not hold as the document gives it; nil when there is none.
func letheFieldsErr(it *item, cur *catalog.Resource) error {
	d := it.doc
	for _, f := range d.SetByLethe() {
		var why string
		switch {
		case it.bundle != nil:
			why = "a bundle member's object cannot carry it"
		case cur == nil:
			why = d.Key().String() + " does not exist"
		case f.Finalizer != "":
			if slices.Contains(cur.Finalizers, f.Finalizer) {
				continue
			}
			why = d.Key().String() + " does not have it"
		default:
			v, ok := cur.Annotations[f.Annotation]
			switch {
			case !ok:
				why = d.Key().String() + " has none"
			case v != f.Value:
				why = fmt.Sprintf("%s has %s, not %s", d.Key(), termtext.Quote(v), termtext.Quote(f.Value))
			default:
				continue
			}
		}
		rule := "set by Lethe when a deletion is scheduled, and taken back only as the catalog holds it"
		if f.Finalizer != "" {
			rule = fmt.Sprintf("finalizer %q is Lethe's, added when a resource enters Deleting, and taken back only as the catalog holds it", f.Finalizer)
		}
		return &ReadOnlyError{Err: d.Errorf(f.Field, "%s: %s", rule, why)}
	}
	return nil
}

// asStored reports whether it's document is the stored resource cur: its
// labels, annotations, finalizers, references, spec and (given) status,
// and its owners as the document writes them (an owner's uid only when
// given). A member given through its bundle is compared without what
// Lethe set on it (its bundle's spec cannot carry those fields) and
// without its bundle's owner edge: the members of a bundle pending
// deletion whose document is the stored one are unchanged with it.
func asStored(it *item, cur *catalog.Resource) bool {
	owners := cur.Owners
	same := it.sameBody
	if it.bundle != nil {
		owners = slices.DeleteFunc(slices.Clone(owners), func(o catalog.OwnerRef) bool { return o.Kind == manifest.KindBundle })
		same = sameBody(withoutLetheFields(cur), it.doc)
	}
	return same && sameOwners(owners, it.doc.Metadata.OwnerReferences)
}

// withoutLetheFields is cur without the annotation and the finalizers
// Lethe sets (a shallow copy).
func withoutLetheFields(cur *catalog.Resource) *catalog.Resource {
	r := *cur
	if _, ok := r.Annotations[catalog.AnnotationDeletionScheduledAt]; ok {
		r.Annotations = maps.Clone(r.Annotations)
		delete(r.Annotations, catalog.AnnotationDeletionScheduledAt)
	}
	r.Finalizers = slices.DeleteFunc(slices.Clone(r.Finalizers), manifest.IsLetheFinalizer)
	return &r
}
