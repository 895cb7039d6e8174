package apply

import (
	"encoding/json"
	"slices"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/storageloc"
)

// What `lethe get KIND NAME -o yaml` prints, apply takes back, for every
// kind: also for a resource apply does not write itself. A Backup (or a
// storage location) is Lethe's, and a bundle member is its bundle's; the
// document of one of them is reported unchanged when it is the stored
// resource, and a document that differs is refused (ReadOnlyError) with
// the first field that differs. Nothing is written for either: apply
// never changes such a resource, not even its labels (the backup engine
// sets them at 'lethe backup create', and a member's come from its
// bundle).

// ReadOnlyError is a document that asks for a change apply cannot make:
// a field of a resource Lethe keeps (a Backup) or that its bundle owns
// (a member). Nothing was written.
type ReadOnlyError struct{ Err error }

func (e *ReadOnlyError) Error() string { return e.Err.Error() + "; nothing was applied" }
func (e *ReadOnlyError) Unwrap() error { return e.Err }

// keptKind reports whether apply takes back, unchanged, the documents of
// kind, a kind whose resources Lethe writes itself.
func keptKind(kind string) bool { return kind == backup.Kind || kind == storageloc.Kind }

// field names the first field in which a stored resource and a document
// differ (noField: none).
type field uint8

const (
	noField field = iota
	fieldLabels
	fieldAnnotations
	fieldOwners
	fieldFinalizers
	fieldReferences
	fieldSpec
	fieldStatus
)

var fieldNames = [...]string{
	fieldLabels: "metadata.labels", fieldAnnotations: "metadata.annotations", fieldOwners: "metadata.ownerReferences",
	fieldFinalizers: "metadata.finalizers", fieldReferences: "references", fieldSpec: "spec", fieldStatus: "status",
}

// isReadOnly reports whether apply only compares the document of it with
// the stored resource (owned by owners): a document of a kept kind, or a
// bundle member given on its own (not through its bundle).
func (it *item) isReadOnly(owners []catalog.OwnerRef) bool {
	if keptKind(it.doc.Kind) {
		return true
	}
	_, member := bundleOwner(owners)
	return member && it.bundle == nil && it.doc.Kind != manifest.KindBundle
}

// firstDiff is the first field in which d differs from cur. Owners are
// compared as the document writes them (an owner's uid only when
// given); a document without status leaves the status alone.
func firstDiff(cur *catalog.Resource, d *manifest.Document) field {
	refs := d.LocalReferences()
	switch {
	case !mapsEqual(cur.Labels, d.Metadata.Labels):
		return fieldLabels
	case !mapsEqual(cur.Annotations, d.Metadata.Annotations):
		return fieldAnnotations
	case !sameOwners(cur.Owners, d.Metadata.OwnerReferences):
		return fieldOwners
	case !slices.Equal(cur.Finalizers, d.Metadata.Finalizers):
		return fieldFinalizers
	case !slices.Equal(cur.References, refs):
		return fieldReferences
	case !sameJSON(cur.Kind, "spec", cur.Spec, d.Spec):
		return fieldSpec
	case len(d.Status) > 0 && !sameJSON(cur.Kind, "status", cur.Status, d.Status):
		return fieldStatus
	}
	return noField
}

func sameOwners(cur []catalog.OwnerRef, doc []manifest.OwnerReference) bool {
	return slices.EqualFunc(cur, doc, func(c catalog.OwnerRef, o manifest.OwnerReference) bool {
		return c.Kind == o.Kind && c.Name == o.Name && c.BlockOwnerDeletion == o.BlockOwnerDeletion && (o.UID == "" || o.UID == c.UID)
	})
}

// sameJSON compares a stored spec or status with a document's. A
// Backup's stored one is also compared as get prints it, as the backup
// engine reads and writes it (every field, zero ones included), so that a
// record written sparsely, or by an older Lethe, matches what get prints
// of it; the document is compared as it is (a field the engine does not
// know differs).
func sameJSON(kind, part string, cur, doc json.RawMessage) bool {
	if jsonEqual(cur, doc) {
		return true
	}
	if kind != backup.Kind {
		return false
	}
	r := &catalog.Resource{Kind: backup.Kind}
	if part == "spec" {
		r.Spec = cur
	} else {
		r.Status = cur
	}
	b, err := backup.FromResource(r)
	if err != nil || b.Encode() != nil {
		return false
	}
	if part == "spec" {
		return jsonEqual(b.Resource.Spec, doc)
	}
	return jsonEqual(b.Resource.Status, doc)
}

// refuseChange is the ReadOnlyError of a read-only document that differs
// from cur in f.
func refuseChange(d *manifest.Document, owners []catalog.OwnerRef, f field) error {
	name := fieldNames[f]
	if o, member := bundleOwner(owners); member && !keptKind(d.Kind) {
		return &ReadOnlyError{Err: d.Errorf(name, "%s is a member of Bundle/%s, which owns its %s: change it through its bundle", d.Key(), o.Name, name)}
	}
	how := "Lethe keeps each Backup as 'lethe backup create' or 'backup sync' registered it"
	if d.Kind == storageloc.Kind {
		how = "Lethe records each location as it last checked it"
	}
	return &ReadOnlyError{Err: d.Errorf(name, "apply cannot change a %s's %s: %s", d.Kind, name, how)}
}

// keptMissing is the refusal of a document of a kept kind that names no
// stored resource.
func keptMissing(d *manifest.Document) error {
	return refuse(d.Errorf("kind", "%s", reservedKind(d.Kind)))
}
