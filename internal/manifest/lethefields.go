package manifest

import (
	"fmt"
	"strings"

	"github.com/lethehq/lethe/internal/catalog"
)

// LetheField is a field of a document that Lethe sets, not a manifest:
// the lethe.io/deletion-scheduled-at annotation (Scheduled) or a
// lethe.io/ finalizer (Deleting). The parser takes them, as lethe get
// prints them; apply takes them back only as the stored resource holds
// them (as kubectl apply ignores server-set fields that are what the
// server holds), and refuses them otherwise.
type LetheField struct {
	// Field is its path in the document ("metadata.finalizers[1]").
	Field string
	// Annotation and Value, or Finalizer.
	Annotation, Value, Finalizer string
}

// SetByLethe lists the fields of d that Lethe sets, in document order.
func (d *Document) SetByLethe() []LetheField {
	var out []LetheField
	if v, ok := d.Metadata.Annotations[catalog.AnnotationDeletionScheduledAt]; ok {
		out = append(out, LetheField{Field: fmt.Sprintf("metadata.annotations[%q]", catalog.AnnotationDeletionScheduledAt),
			Annotation: catalog.AnnotationDeletionScheduledAt, Value: v})
	}
	for i, f := range d.Metadata.Finalizers {
		if IsLetheFinalizer(f) {
			out = append(out, LetheField{Field: fmt.Sprintf("metadata.finalizers[%d]", i), Finalizer: f})
		}
	}
	return out
}

// IsLetheFinalizer reports whether f is one of Lethe's own finalizers
// (lethe.io/...), which only Lethe adds.
func IsLetheFinalizer(f string) bool { return strings.HasPrefix(f, "lethe.io/") }
