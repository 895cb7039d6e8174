package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/storageloc"
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
	// peer is what the item has to do with references to resources on
	// peers (peers.go); nil for most items (one word, not three slices:
	// an apply plans tens of thousands, and the collector scans them).
	peer *peerPlan
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

// readChunk is how many documents' stored resources the plan reads and
// holds at once.
const readChunk = 512

type plan struct {
	items  []*item
	byKey  map[catalog.Key]*item
	prunes []*Change
	// settled are prunes already under way (nothing to do).
	settled map[*Change]bool
	// adopt and prune steps after the batch.
	adoptions []*item
	// take: Options.TakeDocuments; dry: Options.DryRun.
	take, dry bool
	// packed holds the desired state of the planned creates until the
	// write (see pack).
	packed manifest.Packed
	// referrers are the uids of the stored resources that have edges to
	// peers (read once, peers.go).
	referrers map[string]bool
}

// plan plans the n documents of docs, taking them in order a chunk at a
// time (see chunkTaken): at most readChunk documents are taken and not
// yet planned at once, with those held back.
func (e *Engine) plan(ctx context.Context, n int, docs iter.Seq[*manifest.Document], opts Options) (*plan, error) {
	p := &plan{byKey: map[catalog.Key]*item{}, settled: map[*Change]bool{}, take: opts.TakeDocuments, dry: opts.DryRun}
	add := func(it *item) error {
		k := it.doc.Key()
		if prev, dup := p.byKey[k]; dup {
			return refuse(it.doc.Errorf("", "%s is also in %s", k, prev.where()))
		}
		p.byKey[k] = it
		p.items = append(p.items, it)
		it.change = &Change{Kind: it.doc.Kind, Namespace: it.doc.Metadata.Namespace, Name: it.doc.Metadata.Name,
			Source: fmt.Sprintf("%s#%d", it.doc.Source, it.doc.Index), Member: it.member}
		if it.bundle != nil {
			it.change.Bundle = it.bundle.key().String()
		}
		return nil
	}
	// The documents are planned a chunk at a time, as they come: each
	// chunk's stored resources are read with a few queries (GetMany), each
	// compared with its document at once and kept slim (sameBody), and
	// each document planned and let go, so that neither the stored labels,
	// spec and status nor the documents of tens of thousands of resources
	// are all held. A document is held back to the end only when it names
	// an owner or a target that is not planned yet (later in the input, or
	// only in the catalog): planned then, it is planned as if in order.
	var bundles, held []*item
	members, taken, first := 0, 0, 0
	flush := func() error {
		if opts.Progress != nil {
			opts.Progress(first, n+members)
		}
		chunk := p.items[first:]
		if err := e.read(ctx, p, chunk); err != nil {
			return err
		}
		for _, it := range chunk {
			if !p.ready(it) {
				held = append(held, it)
				continue
			}
			if err := e.planOne(ctx, p, it); err != nil {
				return err
			}
		}
		first, taken = len(p.items), 0
		return nil
	}
	for d := range docs {
		if why := reservedKind(d.Kind); why != "" && !keptKind(d.Kind) {
			return nil, refuse(d.Errorf("kind", "%s", why))
		}
		it := &item{doc: d}
		if err := add(it); err != nil {
			return nil, err
		}
		if opts.chunkTaken != nil {
			opts.chunkTaken(taken + 1)
		}
		if d.Kind == manifest.KindBundle {
			b, err := manifest.ParseBundle(d)
			if err != nil {
				return nil, refuse(err)
			}
			bundles = append(bundles, it)
			for _, m := range b.Members {
				if why := reservedKind(m.Doc.Kind); why != "" {
					return nil, refuse(m.Doc.Errorf("kind", "%s", why))
				}
				if err := add(&item{doc: m.Doc, bundle: it, member: m.Name}); err != nil {
					return nil, err
				}
				members++
			}
		}
		if taken++; taken == readChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if taken > 0 {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if opts.Progress != nil {
		opts.Progress(len(p.items), len(p.items))
	}
	for _, it := range held {
		if err := e.planOne(ctx, p, it); err != nil {
			return nil, err
		}
	}
	if err := e.checkCycles(ctx, p, opts.cycleStep); err != nil {
		return nil, err
	}
	for _, b := range bundles {
		if err := e.planPrunes(ctx, p, b); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// read reads the stored resources of items (a few queries, not one per
// item), compares each with its document and keeps it slim.
func (e *Engine) read(ctx context.Context, p *plan, items []*item) error {
	keys := make([]catalog.Key, len(items))
	for i, it := range items {
		keys[i] = it.doc.Key()
	}
	curs, err := e.st.GetMany(ctx, keys)
	if err != nil {
		return err
	}
	for i, it := range items {
		it.letheErr = letheFieldsErr(it, curs[i])
		if cur := curs[i]; cur != nil {
			it.sameBody = sameBody(cur, it.doc)
			it.asStored = asStored(it, cur)
			if it.readOnly = it.isReadOnly(cur.Owners); it.readOnly {
				it.diff = firstDiff(cur, it.doc)
			}
			// An update keeps the stored status and conditions.
			it.cur = &stored{UID: cur.UID, Phase: cur.Phase, ResourceVersion: cur.ResourceVersion, DeletionDueAt: cur.DeletionDueAt,
				Owners: cur.Owners, References: cur.References, Status: cur.Status, Conditions: cur.Conditions}
		}
	}
	return e.readPeerReferences(ctx, p, items)
}

// ready reports whether it can be planned now as it would be in input
// order: its bundle is planned, and every owner and target it names is
// in the plan already (an owner planned too).
func (p *plan) ready(it *item) bool {
	if it.bundle != nil && it.bundle.doc != nil {
		return false
	}
	d := it.doc
	for _, o := range d.Metadata.OwnerReferences {
		// resolveOwner looks in the namespace first.
		t, ok := p.byKey[catalog.Key{Kind: o.Kind, Namespace: d.Metadata.Namespace, Name: o.Name}]
		if !ok || t.doc != nil {
			return false
		}
	}
	for _, r := range d.References {
		if r.Peer != "" {
			continue // on another catalog: nothing to plan first
		}
		if _, ok := p.byKey[catalog.Key{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}]; !ok && r.OnTargetDelete != catalog.RefAllowDangling {
			return false
		}
	}
	return true
}

// planOne plans it and lets its document go.
func (e *Engine) planOne(ctx context.Context, p *plan, it *item) error {
	if err := e.planItem(ctx, p, it); err != nil {
		return err
	}
	it.reportPeerDrops()
	if it.cur != nil {
		it.cur.Status, it.cur.Conditions = nil, nil
	}
	it.done() // its document is not held to the end
	if p.dry {
		// Nothing is written: the cycle check needs only the edges.
		it.edges, it.desired = edgesOf(it.desired), nil
	} else if !p.pack(it) {
		it.fold()
	}
	return nil
}

// pack packs the desired state of a planned create into p.packed, where
// the write unpacks it (resource): the desired state of tens of
// thousands of creates, with their labels, spec and status, is about
// 7 MiB of bytes that the garbage collector does not scan, instead of
// 30 MiB of resources that it scans on every cycle of the write. Only a
// create is packed, and only when it holds nothing but what a document
// gives and its owners (not the case of an update: its stored
// conditions and status).
func (p *plan) pack(it *item) bool {
	r := it.desired
	if r == nil || it.cur != nil || it.change.Action != Created || r.UID != it.change.UID {
		return false
	}
	rest := *r
	rest.Kind, rest.Namespace, rest.Name, rest.UID = "", "", "", ""
	rest.Labels, rest.Annotations, rest.Finalizers = nil, nil, nil
	rest.Owners, rest.References, rest.Spec, rest.Status = nil, nil, nil, nil
	if !reflect.ValueOf(rest).IsZero() {
		return false
	}
	d := &manifest.Document{Kind: r.Kind, Spec: r.Spec, Status: r.Status, Metadata: manifest.Metadata{
		Name: r.Name, Namespace: r.Namespace, Labels: r.Labels, Annotations: r.Annotations, Finalizers: r.Finalizers}}
	if r.Owners != nil {
		d.Metadata.OwnerReferences = make([]manifest.OwnerReference, len(r.Owners))
		for i, o := range r.Owners {
			d.Metadata.OwnerReferences[i] = manifest.OwnerReference{Kind: o.Kind, Name: o.Name, UID: o.UID, BlockOwnerDeletion: o.BlockOwnerDeletion}
		}
	}
	if r.References != nil {
		d.References = make([]manifest.Reference, len(r.References))
		for i, ref := range r.References {
			if ref.UID != "" {
				return false
			}
			d.References[i] = manifest.Reference{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, OnTargetDelete: ref.OnTargetDelete}
		}
	}
	it.pos = p.packed.Add(d) + 1
	it.edges, it.desired = edgesOf(r), nil
	return true
}

// unpack is the desired state pack packed.
func (p *plan) unpack(it *item) *catalog.Resource {
	d := p.packed.At(it.pos - 1)
	md := &d.Metadata
	r := &catalog.Resource{Kind: d.Kind, Namespace: md.Namespace, Name: md.Name, UID: it.change.UID,
		Labels: md.Labels, Annotations: md.Annotations, Finalizers: md.Finalizers, Spec: d.Spec, Status: d.Status}
	if md.OwnerReferences != nil {
		r.Owners = make([]catalog.OwnerRef, len(md.OwnerReferences))
		for i, o := range md.OwnerReferences {
			r.Owners[i] = catalog.OwnerRef{Kind: o.Kind, Name: o.Name, UID: o.UID, BlockOwnerDeletion: o.BlockOwnerDeletion}
		}
	}
	if d.References != nil {
		r.References = make([]catalog.Reference, len(d.References))
		for i, ref := range d.References {
			r.References[i] = catalog.Reference{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, OnTargetDelete: ref.OnTargetDelete}
		}
	}
	return r
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

func (e *Engine) planItem(ctx context.Context, p *plan, it *item) error {
	d, cur, ch := it.doc, it.cur, it.change
	if it.letheErr != nil {
		return it.letheErr
	}
	if err := e.planPeerReferences(it); err != nil {
		return err
	}
	// The sync filter, and what bundles own.
	if it.bundle != nil && it.bundle.skipped {
		it.skipped = true
		ch.Action, ch.Reason = Skipped, fmt.Sprintf("its bundle is %s", it.bundle.cur.Phase)
		if cur != nil {
			ch.UID, ch.Phase, ch.ResourceVersion = cur.UID, cur.Phase, cur.ResourceVersion
			if it.asStored {
				ch.Action, ch.Reason = Unchanged, ""
			}
		} else if it.bundle.asStored {
			// The bundle's document is the stored bundle (what get prints
			// of it): a member it lists that is gone, purged by the
			// bundle's own deletion, asks for nothing.
			ch.Action, ch.Reason = Unchanged, fmt.Sprintf("purged; its bundle is %s", it.bundle.cur.Phase)
		}
		return nil
	}
	if cur != nil {
		ch.UID, ch.Phase, ch.ResourceVersion = cur.UID, cur.Phase, cur.ResourceVersion
		ch.DueAt = cur.DeletionDueAt
		if o, ok := bundleOwner(cur.Owners); ok && it.bundle != nil && (it.bundle.cur == nil || it.bundle.cur.UID != o.UID) {
			return refuse(d.Errorf("", "%s already belongs to Bundle/%s (uid %s); remove it from that bundle first", d.Key(), o.Name, o.UID))
		}
		if v := d.Metadata.ResourceVersion; v != 0 && v != cur.ResourceVersion {
			return &ConflictError{Key: d.Key(), Err: fmt.Errorf("the manifest has resourceVersion %d but the catalog has %d (it changed since the manifest was written)", v, cur.ResourceVersion)}
		}
		// A Backup, or a member on its own: taken back unchanged, never
		// changed (kept.go).
		if it.readOnly && it.diff != noField {
			return refuseChange(d, cur.Owners, it.diff)
		}
		// Only its own bundle adopts a Scheduled member.
		o, owned := bundleOwner(cur.Owners)
		adopt := it.bundle != nil && cur.Phase == catalog.PhaseScheduled && owned && it.bundle.cur != nil && o.UID == it.bundle.cur.UID
		if cur.Phase != catalog.PhaseActive && !adopt {
			// Nothing is written for it (nor for a bundle's members, and
			// no member is pruned); a document that is the stored
			// resource, what get prints of it, is unchanged. A member
			// that its Active bundle lists is skipped: the bundle asks
			// for it back, and apply does not bring it back.
			it.skipped = true
			if it.asStored && it.bundle == nil {
				if o, member := bundleOwner(cur.Owners); member && it.readOnly {
					ch.Bundle = catalog.Key{Kind: manifest.KindBundle, Name: o.Name}.String()
				}
				ch.Action = Unchanged
				return nil
			}
			ch.Action = Skipped
			if cur.Phase == catalog.PhaseScheduled {
				ch.Reason = fmt.Sprintf("Scheduled for deletion at %s: apply does not change it (undelete it first)", cur.DeletionDueAt.UTC().Format(time.RFC3339))
			} else {
				ch.Reason = "Deleting: apply does not change or re-create it; apply again once it is purged"
			}
			return nil
		}
		if it.readOnly {
			if o, member := bundleOwner(cur.Owners); member {
				ch.Bundle = catalog.Key{Kind: manifest.KindBundle, Name: o.Name}.String()
			}
			ch.Action = Unchanged
			return nil
		}
	} else if keptKind(d.Kind) {
		return keptMissing(d)
	} else if d.Metadata.ResourceVersion != 0 {
		return &ConflictError{Key: d.Key(), Err: fmt.Errorf("the manifest has resourceVersion %d, but it does not exist", d.Metadata.ResourceVersion)}
	}

	// The desired state.
	var want *catalog.Resource
	if p.take {
		want = d.TakeResource()
	} else {
		want = d.Resource()
	}
	if it.bundle != nil {
		b := it.bundle
		uid := ""
		if b.cur != nil {
			uid = b.cur.UID
		} else {
			uid = b.newUID()
		}
		want.Owners = append(want.Owners, catalog.OwnerRef{UID: uid, Kind: manifest.KindBundle, Name: b.change.Name, BlockOwnerDeletion: true})
		it.deps = append(it.deps, b)
	}
	for i, o := range d.Metadata.OwnerReferences {
		field := fmt.Sprintf("metadata.ownerReferences[%d]", i)
		ref, dep, err := e.resolveOwner(ctx, p, d, o)
		if err != nil {
			return refuse(d.Errorf(field, "%v", err))
		}
		if it.bundle != nil && ref.Kind == manifest.KindBundle {
			return refuse(d.Errorf(field, "a bundle member's bundle is its owner already"))
		}
		want.Owners = append(want.Owners, ref)
		if dep != nil {
			it.deps = append(it.deps, dep)
		}
	}
	for i, r := range d.References {
		if r.OnTargetDelete == catalog.RefAllowDangling || r.Peer != "" {
			continue
		}
		k := catalog.Key{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
		field := fmt.Sprintf("references[%d]", i)
		if t, ok := p.byKey[k]; ok {
			if t.cur != nil && t.cur.Phase == catalog.PhaseDeleting {
				return refuse(d.Errorf(field, "target %s is being deleted", k))
			}
			continue
		}
		t, err := e.st.Get(ctx, k)
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			return refuse(d.Errorf(field, "%s target %s does not exist (in the catalog or in this apply); use allowDangling for a target that may be missing", r.OnTargetDelete, k))
		case err != nil:
			return err
		case t.Phase == catalog.PhaseDeleting:
			return refuse(d.Errorf(field, "target %s is being deleted", k))
		}
	}
	if cur == nil {
		want.UID = it.newUID()
		it.desired = want
		ch.UID, ch.Phase, ch.Action = want.UID, catalog.PhaseActive, Created
		return nil
	}
	// What apply does not manage is kept: the status when the manifest
	// has none, and the conditions.
	want.UID = cur.UID
	want.ResourceVersion = cur.ResourceVersion
	if len(want.Status) == 0 {
		want.Status = cur.Status
	}
	want.Conditions = cur.Conditions
	if cur.Phase == catalog.PhaseScheduled {
		// Adoption: back to Active, the countdown cancelled.
		it.desired = want
		p.adoptions = append(p.adoptions, it)
		ch.Action, ch.Phase, ch.DueAt = Adopted, catalog.PhaseActive, nil
		ch.Reason = fmt.Sprintf("was Scheduled for deletion at %s; back in its bundle", cur.DeletionDueAt.UTC().Format(time.RFC3339))
		return nil
	}
	if it.sameBody && slices.Equal(cur.Owners, want.Owners) { // same(cur, want), from the full resource read earlier
		ch.Action = Unchanged
		return nil
	}
	it.desired = want
	ch.Action = Updated
	return nil
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

// resolveOwner finds an owner by kind and name: in the dependent's
// namespace, then cluster-scoped; in this apply first, then the catalog.
func (e *Engine) resolveOwner(ctx context.Context, p *plan, d *manifest.Document, o manifest.OwnerReference) (catalog.OwnerRef, *item, error) {
	keys := []catalog.Key{{Kind: o.Kind, Namespace: d.Metadata.Namespace, Name: o.Name}}
	if d.Metadata.Namespace != "" {
		keys = append(keys, catalog.Key{Kind: o.Kind, Name: o.Name})
	}
	ref := catalog.OwnerRef{Kind: o.Kind, Name: o.Name, BlockOwnerDeletion: o.BlockOwnerDeletion}
	check := func(k catalog.Key, uid string, phase catalog.Phase) error {
		switch {
		case o.UID != "" && o.UID != uid:
			return fmt.Errorf("owner %s has uid %s, not %s", k, uid, o.UID)
		case phase == catalog.PhaseDeleting:
			return fmt.Errorf("owner %s is being deleted: a new dependent would outlive it", k)
		}
		return nil
	}
	for _, k := range keys {
		if it, ok := p.byKey[k]; ok {
			if it.cur != nil {
				if err := check(k, it.cur.UID, it.cur.Phase); err != nil {
					return ref, nil, err
				}
				ref.UID = it.cur.UID
			} else {
				// Read from the stored phases, not from skipped: the owner
				// may be listed after the dependent, and planned after it.
				if it.bundle != nil && it.bundle.cur != nil && it.bundle.cur.Phase != catalog.PhaseActive {
					return ref, nil, fmt.Errorf("owner %s is not being applied: its bundle is pending deletion", k)
				}
				ref.UID = it.newUID()
				if o.UID != "" && o.UID != ref.UID {
					return ref, nil, fmt.Errorf("owner %s is created by this apply, so it cannot have uid %s", k, o.UID)
				}
			}
			return ref, it, nil
		}
		r, err := e.st.Get(ctx, k)
		if errors.Is(err, catalog.ErrNotFound) {
			continue
		}
		if err != nil {
			return ref, nil, err
		}
		if err := check(k, r.UID, r.Phase); err != nil {
			return ref, nil, err
		}
		ref.UID = r.UID
		return ref, nil, nil
	}
	where := keys[0].String()
	if len(keys) > 1 {
		where += " or " + keys[1].String()
	}
	return ref, nil, fmt.Errorf("owner %s does not exist (in the catalog or in this apply)", where)
}

// fold keeps the desired labels and annotations as flat key, value
// lists until the write: a Go map of two labels takes about 400 bytes,
// and an apply holds tens of thousands of them.
func (it *item) fold() {
	if it.desired == nil {
		return
	}
	it.labels, it.desired.Labels = flat(it.desired.Labels), nil
	it.annotations, it.desired.Annotations = flat(it.desired.Annotations), nil
}

// resource is the desired resource, whole: unpacked (see pack), or a
// copy of desired with its labels and annotations unfolded.
func (p *plan) resource(it *item) *catalog.Resource {
	if it.pos != 0 {
		return p.unpack(it)
	}
	r := *it.desired
	if it.labels != nil {
		r.Labels = unflat(it.labels)
	}
	if it.annotations != nil {
		r.Annotations = unflat(it.annotations)
	}
	return &r
}

func flat(m map[string]string) []string {
	if m == nil {
		return nil
	}
	out := make([]string, 0, 2*len(m))
	for k, v := range m {
		out = append(out, k, v)
	}
	return out
}

func unflat(l []string) map[string]string {
	m := make(map[string]string, len(l)/2)
	for i := 0; i+1 < len(l); i += 2 {
		m[l[i]] = l[i+1]
	}
	return m
}

// reservedKind says why apply does not write kind, a kind Lethe keeps
// itself; "" for any other kind.
func reservedKind(kind string) string {
	switch kind {
	case backup.Kind:
		return "apply does not write Backups: register one with 'lethe backup create'"
	case storageloc.Kind:
		return "apply does not write BackupStorageLocations: Lethe records what it sees of the locations configured with --location (or the config file's location list)"
	case "LeaderLease", "AuditEntry", "RetryItem":
		return "apply does not write " + kind + "s: Lethe keeps them itself"
	}
	return ""
}
