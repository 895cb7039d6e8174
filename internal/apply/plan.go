package apply

import (
	"context"
	"fmt"
	"iter"
	"reflect"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
)

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
		if err := e.read(ctx, chunk); err != nil {
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
func (e *Engine) read(ctx context.Context, items []*item) error {
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
	return nil
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
