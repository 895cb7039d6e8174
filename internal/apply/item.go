package apply

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
)

// item is one resource in the plan.
type item struct {
	// doc is the document until the item is planned (then origin).
	doc     *manifest.Document
	origin  origin
	bundle  *item  // the bundle of a member
	member  string // member name
	cur     *stored
	desired *catalog.Resource
	// edges stand for desired in a dry run, once the item is planned.
	edges  *edges
	change *Change
	// deps are the planned items this one's owners are.
	deps []*item
	// skipped: left as it is by the sync filter (reported skipped, or
	// unchanged when its document is the stored resource): nothing is
	// written for it (nor, for a bundle, for its members).
	skipped bool
	// visited by write's walk, owners first.
	visited bool
	// peerRefs are the document's references to resources on peers:
	// forward edges added once the resource is written (peers.go).
	peerRefs []catalog.PeerReference
	// labels and annotations of desired, folded (see fold).
	labels, annotations []string
	// sameBody: the stored resource has the document's labels,
	// annotations, finalizers, references, spec and status (all but the
	// owners, which planItem resolves).
	sameBody bool
	// readOnly: a document apply only compares with the stored resource
	// (a Backup, a bundle member on its own); diff is the first field in
	// which they differ (kept.go).
	readOnly bool
	diff     field
	// asStored: the document is the stored resource (lethefields.go);
	// letheErr refuses a field Lethe sets that the stored resource does
	// not hold as the document gives it.
	asStored bool
	letheErr error
	// pos is 1 + the position in plan.packed of a create's desired
	// state (packed: desired is nil, edges stand for it), 0 otherwise.
	pos int
}

func (it *item) where() string { return it.document().Where() }

// origin is where a planned item's document came from: enough for a
// message about it once the document itself is let go.
type origin struct {
	source, field, container string
	index, line              int
}

// done lets the item's document go once it is planned, keeping where it
// came from (tens of thousands of documents are not held to the end).
func (it *item) done() {
	d := it.doc
	it.origin = origin{source: d.Source, field: d.Field, container: d.Container, index: d.Index, line: d.Line}
	it.doc = nil
}

// document is the item's document, or once it is planned a stand-in
// with its identity and origin, for keys and messages.
func (it *item) document() *manifest.Document {
	if it.doc != nil {
		return it.doc
	}
	o := it.origin
	return &manifest.Document{Source: o.source, Index: o.index, Line: o.line, Field: o.field, Container: o.container,
		Kind: it.change.Kind, Metadata: manifest.Metadata{Name: it.change.Name, Namespace: it.change.Namespace}}
}

// key is the item's key.
func (it *item) key() catalog.Key {
	if it.change != nil {
		return it.change.Key()
	}
	return it.doc.Key()
}

// stored is what the plan keeps of a stored resource: its identity and
// phase for the items that name it, its edges for the cycle check, and
// until it is planned its status and conditions (an update keeps them).
// A catalog.Resource holds far more, and an apply reads tens of
// thousands.
type stored struct {
	UID             string
	Phase           catalog.Phase
	ResourceVersion int64
	DeletionDueAt   *time.Time
	Owners          []catalog.OwnerRef
	References      []catalog.Reference
	Status          json.RawMessage
	Conditions      []catalog.Condition
}

// edges is what a dry run keeps of a planned resource: its owners and
// references, for the cycle check (its uid is its change's). Nothing is
// written, so its labels, annotations, spec and status are let go; a
// catalog.Resource, even empty, is about 400 bytes, and a dry run plans
// tens of thousands.
type edges struct {
	owners []catalog.OwnerRef
	refs   []catalog.Reference
}

// noEdges is the edges of every planned resource without owners or
// references (most of a large apply): one value, not one each.
var noEdges = &edges{}

func edgesOf(r *catalog.Resource) *edges {
	switch {
	case r == nil:
		return nil
	case len(r.Owners) == 0 && len(r.References) == 0:
		return noEdges
	}
	return &edges{owners: r.Owners, refs: r.References}
}

// planned is the planned resource's uid and edges; ok is false when
// nothing is written for the item (unchanged or skipped).
func (it *item) planned() (uid string, owners []catalog.OwnerRef, refs []catalog.Reference, ok bool) {
	switch {
	case it.desired != nil:
		return it.desired.UID, it.desired.Owners, it.desired.References, true
	case it.edges != nil:
		return it.change.UID, it.edges.owners, it.edges.refs, true
	}
	return "", nil, nil, false
}

// bundleOwner returns the Bundle owner ref among owners, if any.
func bundleOwner(owners []catalog.OwnerRef) (catalog.OwnerRef, bool) {
	for _, o := range owners {
		if o.Kind == manifest.KindBundle {
			return o, true
		}
	}
	return catalog.OwnerRef{}, false
}

// newUID gives a planned create its uid up front, so that dependents in
// the same apply can name it.
func (it *item) newUID() string {
	if it.desired != nil && it.desired.UID != "" {
		return it.desired.UID
	}
	if it.change != nil && it.change.UID != "" {
		return it.change.UID
	}
	id := uuid.Must(uuid.NewV7()).String()
	if it.change != nil {
		it.change.UID = id
	}
	return id
}
