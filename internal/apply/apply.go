// Package apply is the engine of `lethe apply`: it creates or updates
// catalog resources of any kind from validated manifests
// (internal/manifest), and reconciles bundles (kind Bundle): their
// members are created, updated, adopted back from Scheduled, or pruned
// when they leave the bundle's spec.
//
// An apply is planned first, from reads only: every document is checked
// against the catalog (owners and block, unset and cascade targets exist,
// in the catalog or in the same apply; no owner cycle; a resource that
// another bundle owns is refused), and every refusal fails the whole
// apply before anything is written. The creates and updates are then one
// catalog.WriteBatch: one transaction, so they commit together or not at
// all. Bundle adoption (Undelete, then the spec) and pruning (Schedule or
// delete) are lifecycle steps after that transaction; each is atomic on
// its own and idempotent, so applying the same bundle again finishes
// whatever a crash interrupted.
//
// The sync filter: a resource that is Scheduled or Deleting is never
// re-created or changed by apply, except a Scheduled member adopted by its
// own bundle. Such a resource is reported as skipped.
//
// It must not touch drivers, plugins or the collector's internals: a
// pruned member without a delay goes to a Pruner (the collector).
package apply

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
)

// Catalog is the part of the catalog the engine uses.
type Catalog interface {
	catalog.Resources
	catalog.Graph
	Schedule(ctx context.Context, k catalog.Key, opts catalog.ScheduleOptions) (*catalog.Resource, error)
	Undelete(ctx context.Context, k catalog.Key, reason string) (*catalog.Resource, error)
	Delete(ctx context.Context, k catalog.Key, opts catalog.DeleteOptions) (*catalog.Resource, error)
}

// Pruner deletes a pruned bundle member at once, with its cascade and
// plugins: the garbage collector.
type Pruner interface {
	Delete(ctx context.Context, k catalog.Key) error
}

// LifecyclePruner moves a resource to Deleting with the collector's
// finalizers (Foreground, lethe.io/cascade and lethe.io/delete-actions),
// for the collector to finish. It is the default Pruner.
type LifecyclePruner struct {
	Store interface {
		Delete(ctx context.Context, k catalog.Key, opts catalog.DeleteOptions) (*catalog.Resource, error)
	}
}

// Delete implements Pruner.
func (p LifecyclePruner) Delete(ctx context.Context, k catalog.Key) error {
	_, err := p.Store.Delete(ctx, k, catalog.DeleteOptions{
		Propagation: catalog.PropagationForeground,
		Finalizers:  []string{catalog.FinalizerCascade, catalog.FinalizerDeleteActions},
		Reason:      "pruned from its bundle",
	})
	return err
}

// PruneChecker is a Pruner that can say, before anything is written,
// that it would refuse a member (the collector refuses one held by a
// block reference). Apply then refuses the whole apply, dry run included,
// and changes nothing.
type PruneChecker interface {
	CheckDelete(ctx context.Context, k catalog.Key) error
}

// Config configures an Engine.
type Config struct {
	Store Catalog
	// Pruner deletes pruned members without a delay (default:
	// LifecyclePruner on Store).
	Pruner Pruner
	Now    func() time.Time
}

// Engine applies manifests.
type Engine struct {
	st     Catalog
	pruner Pruner
	now    func() time.Time
}

// New returns an Engine.
func New(cfg *Config) (*Engine, error) {
	if cfg.Store == nil {
		return nil, errors.New("apply: Config.Store is required")
	}
	e := &Engine{st: cfg.Store, pruner: cfg.Pruner, now: cfg.Now}
	if e.pruner == nil {
		e.pruner = LifecyclePruner{Store: cfg.Store}
	}
	if e.now == nil {
		e.now = time.Now
	}
	return e, nil
}

// Action is what apply did, or would do, to one resource.
type Action string

// Actions.
const (
	Created   Action = "created"
	Updated   Action = "updated"
	Unchanged Action = "unchanged"
	// Skipped: the sync filter left a Scheduled or Deleting resource as
	// it is.
	Skipped Action = "skipped"
	// Adopted: a Scheduled bundle member back in its bundle's spec is
	// Active again, its countdown cancelled, its spec the desired one.
	Adopted Action = "adopted"
	// Scheduled: a pruned member with lethe.io/deletion-delay counts down.
	Scheduled Action = "scheduled"
	// Deleted: a pruned member without a delay was handed to the
	// collector (it is Deleting).
	Deleted Action = "deleted"
	// Released: a pruned member that has other owners only lost the
	// bundle's owner edge (it is deleted when none of its owners remains).
	Released Action = "released"
)

// Change is the report for one resource.
type Change struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Action    Action `json:"action"`
	// Source is the document ("app.yaml#2"); empty for a pruned member.
	Source string `json:"source,omitempty"`
	// Bundle and Member name the bundle a member belongs to.
	Bundle string `json:"bundle,omitempty"`
	Member string `json:"member,omitempty"`
	UID    string `json:"uid,omitempty"`
	// Phase is the resource's phase after the apply (before, on a dry run).
	Phase           catalog.Phase `json:"phase,omitempty"`
	ResourceVersion int64         `json:"resourceVersion,omitempty"`
	// DueAt is when a Scheduled resource's grace window ends.
	DueAt *time.Time `json:"dueAt,omitempty"`
	// Reason says why a resource was skipped, scheduled or deleted.
	Reason string `json:"reason,omitempty"`
}

// Key is the changed resource's key.
func (c *Change) Key() catalog.Key {
	return catalog.Key{Kind: c.Kind, Namespace: c.Namespace, Name: c.Name}
}

// Result is the report of one apply.
type Result struct {
	DryRun  bool      `json:"dryRun"`
	Changes []*Change `json:"resources"`
}

// Count counts the changes with action a.
func (r *Result) Count(a Action) int {
	n := 0
	for _, c := range r.Changes {
		if c.Action == a {
			n++
		}
	}
	return n
}

// Options are the options of one apply.
type Options struct {
	// DryRun plans and reports, and writes nothing.
	DryRun bool
	// Progress, when set, is told how many of the resources to apply
	// were read from the catalog (the long part of planning a large
	// input).
	Progress func(done, total int)
}

// RefusedError is an apply refused while planning: nothing was written.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// ConflictError is a conflict: the catalog changed between the plan and the write (or
// differs from the manifest's resourceVersion); nothing was written.
type ConflictError struct {
	Key catalog.Key
	Err error
	// Race: another writer changed the catalog while apply ran (else the
	// manifest's resourceVersion is not the stored one).
	Race bool
}

func (e *ConflictError) Error() string {
	if e.Race {
		return fmt.Sprintf("%s changed while apply ran (%v): nothing was applied; apply again", e.Key, e.Err)
	}
	return fmt.Sprintf("%s: %v: nothing was applied", e.Key, e.Err)
}
func (e *ConflictError) Unwrap() error { return e.Err }

// item is one resource in the plan.
type item struct {
	doc     *manifest.Document
	bundle  *item  // the bundle of a member
	member  string // member name
	cur     *catalog.Resource
	desired *catalog.Resource
	change  *Change
	// deps are the planned items this one's owners are.
	deps []*item
	// skipped by the sync filter: nothing is written for it (nor, for a
	// bundle, for its members).
	skipped bool
}

type plan struct {
	items  []*item
	byKey  map[catalog.Key]*item
	prunes []*Change
	// settled are prunes already under way (nothing to do).
	settled map[*Change]bool
	// adopt and prune steps after the batch.
	adoptions []*item
}

// Apply applies docs (in order; a bundle's members follow it).
func (e *Engine) Apply(ctx context.Context, docs []*manifest.Document, opts Options) (*Result, error) {
	p, err := e.plan(ctx, docs, opts.Progress)
	if err != nil {
		return nil, err
	}
	res := &Result{DryRun: opts.DryRun}
	for _, it := range p.items {
		res.Changes = append(res.Changes, it.change)
	}
	res.Changes = append(res.Changes, p.prunes...)
	if err := e.checkPrunes(ctx, p); err != nil {
		return nil, err
	}
	if opts.DryRun {
		return res, nil
	}
	if err := e.write(ctx, p); err != nil {
		return nil, err
	}
	if err := e.adopt(ctx, p); err != nil {
		return res, err
	}
	if err := e.prune(ctx, p); err != nil {
		return res, err
	}
	return res, nil
}

func refuse(err error) error { return &RefusedError{Err: err} }

func (e *Engine) plan(ctx context.Context, docs []*manifest.Document, progress func(done, total int)) (*plan, error) {
	p := &plan{byKey: map[catalog.Key]*item{}, settled: map[*Change]bool{}}
	add := func(it *item) error {
		k := it.doc.Key()
		if prev, dup := p.byKey[k]; dup {
			return refuse(it.doc.Errorf("", "%s is also in %s", k, prev.where()))
		}
		p.byKey[k] = it
		p.items = append(p.items, it)
		return nil
	}
	var bundles []*manifest.Bundle
	for _, d := range docs {
		if d.Kind == backup.Kind {
			return nil, refuse(d.Errorf("kind", "apply does not write Backups: register one with 'lethe backup create'"))
		}
		it := &item{doc: d}
		if err := add(it); err != nil {
			return nil, err
		}
		if d.Kind != manifest.KindBundle {
			continue
		}
		b, err := manifest.ParseBundle(d)
		if err != nil {
			return nil, refuse(err)
		}
		bundles = append(bundles, b)
		for _, m := range b.Members {
			if m.Doc.Kind == backup.Kind {
				return nil, refuse(m.Doc.Errorf("kind", "apply does not write Backups: register one with 'lethe backup create'"))
			}
			if err := add(&item{doc: m.Doc, bundle: it, member: m.Name}); err != nil {
				return nil, err
			}
		}
	}
	// Read what exists.
	for i, it := range p.items {
		if progress != nil {
			progress(i, len(p.items))
		}
		cur, err := e.st.Get(ctx, it.doc.Key())
		switch {
		case errors.Is(err, catalog.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			it.cur = cur
		}
		it.change = &Change{Kind: it.doc.Kind, Namespace: it.doc.Metadata.Namespace, Name: it.doc.Metadata.Name,
			Source: fmt.Sprintf("%s#%d", it.doc.Source, it.doc.Index), Member: it.member}
		if it.bundle != nil {
			it.change.Bundle = it.bundle.doc.Key().String()
		}
	}
	if progress != nil {
		progress(len(p.items), len(p.items))
	}
	for _, it := range p.items {
		if err := e.planItem(ctx, p, it); err != nil {
			return nil, err
		}
	}
	if err := e.checkCycles(ctx, p); err != nil {
		return nil, err
	}
	for _, b := range bundles {
		if err := e.planPrunes(ctx, p, p.byKey[b.Doc.Key()]); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (it *item) where() string { return it.doc.Where() }

// bundleOwner returns the Bundle owner ref of r, if any.
func bundleOwner(r *catalog.Resource) (catalog.OwnerRef, bool) {
	for _, o := range r.Owners {
		if o.Kind == manifest.KindBundle {
			return o, true
		}
	}
	return catalog.OwnerRef{}, false
}

func (e *Engine) planItem(ctx context.Context, p *plan, it *item) error {
	d, cur, ch := it.doc, it.cur, it.change
	// The sync filter, and what bundles own.
	if it.bundle != nil && it.bundle.skipped {
		it.skipped = true
		ch.Action, ch.Reason = Skipped, fmt.Sprintf("its bundle is %s", it.bundle.cur.Phase)
		if cur != nil {
			ch.UID, ch.Phase, ch.ResourceVersion = cur.UID, cur.Phase, cur.ResourceVersion
		}
		return nil
	}
	if cur != nil {
		ch.UID, ch.Phase, ch.ResourceVersion = cur.UID, cur.Phase, cur.ResourceVersion
		ch.DueAt = cur.DeletionDueAt
		if o, ok := bundleOwner(cur); ok {
			switch {
			case it.bundle == nil && d.Kind != manifest.KindBundle:
				return refuse(d.Errorf("", "%s is a member of Bundle/%s: change it through its bundle", d.Key(), o.Name))
			case it.bundle != nil && (it.bundle.cur == nil || it.bundle.cur.UID != o.UID):
				return refuse(d.Errorf("", "%s already belongs to Bundle/%s (uid %s); remove it from that bundle first", d.Key(), o.Name, o.UID))
			}
		}
		if v := d.Metadata.ResourceVersion; v != 0 && v != cur.ResourceVersion {
			return &ConflictError{Key: d.Key(), Err: fmt.Errorf("the manifest has resourceVersion %d but the catalog has %d (it changed since the manifest was written)", v, cur.ResourceVersion)}
		}
		// Only its own bundle adopts a Scheduled member.
		o, owned := bundleOwner(cur)
		adopt := it.bundle != nil && cur.Phase == catalog.PhaseScheduled && owned && it.bundle.cur != nil && o.UID == it.bundle.cur.UID
		if cur.Phase != catalog.PhaseActive && !adopt {
			it.skipped = true
			ch.Action = Skipped
			if cur.Phase == catalog.PhaseScheduled {
				ch.Reason = fmt.Sprintf("Scheduled for deletion at %s: apply does not change it (undelete it first)", cur.DeletionDueAt.UTC().Format(time.RFC3339))
			} else {
				ch.Reason = "Deleting: apply does not change or re-create it; apply again once it is purged"
			}
			return nil
		}
	} else if d.Metadata.ResourceVersion != 0 {
		return &ConflictError{Key: d.Key(), Err: fmt.Errorf("the manifest has resourceVersion %d, but it does not exist", d.Metadata.ResourceVersion)}
	}

	// The desired state.
	want := d.Resource()
	if it.bundle != nil {
		b := it.bundle
		uid := ""
		if b.cur != nil {
			uid = b.cur.UID
		} else {
			uid = b.newUID()
		}
		want.Owners = append(want.Owners, catalog.OwnerRef{UID: uid, Kind: manifest.KindBundle, Name: b.doc.Metadata.Name, BlockOwnerDeletion: true})
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
		if r.OnTargetDelete == catalog.RefAllowDangling {
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
	if len(d.Status) == 0 {
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
	if same(cur, want) {
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
	check := func(k catalog.Key, r *catalog.Resource) error {
		switch {
		case o.UID != "" && o.UID != r.UID:
			return fmt.Errorf("owner %s has uid %s, not %s", k, r.UID, o.UID)
		case r.Phase == catalog.PhaseDeleting:
			return fmt.Errorf("owner %s is being deleted: a new dependent would outlive it", k)
		}
		return nil
	}
	for _, k := range keys {
		if it, ok := p.byKey[k]; ok {
			if it.cur != nil {
				if err := check(k, it.cur); err != nil {
					return ref, nil, err
				}
				ref.UID = it.cur.UID
			} else {
				if it.skipped || it.bundle != nil && it.bundle.skipped {
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
		if err := check(k, r); err != nil {
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

// checkCycles refuses a cycle of deletion edges (owner edges, block and
// cascade references, in any mix: catalog.CycleError), from the planned
// resources and the stored ones: walking upwards from a planned resource
// (through its owners and the targets of its block and cascade
// references) must never come back to it. The catalog checks the same
// again inside the write's transaction, so that two applies racing
// cannot store one; this check says it before anything is written, dry
// run included.
func (e *Engine) checkCycles(ctx context.Context, p *plan) error {
	type up struct {
		uid string // the upstream end
		via string
	}
	type node struct {
		key catalog.Key
		ups []up
	}
	nodes := map[string]*node{}
	uidOf := func(k catalog.Key, want string) (string, error) {
		if it, ok := p.byKey[k]; ok {
			switch {
			case it.desired != nil:
				return it.desired.UID, nil
			case it.cur != nil:
				return it.cur.UID, nil
			}
			return "", nil
		}
		r, err := e.st.Get(ctx, k)
		if errors.Is(err, catalog.ErrNotFound) {
			return "", nil
		}
		if err != nil || (want != "" && want != r.UID) {
			return "", err
		}
		return r.UID, nil
	}
	mk := func(r *catalog.Resource) (*node, error) {
		n := &node{key: r.Key()}
		for _, o := range r.Owners {
			n.ups = append(n.ups, up{o.UID, catalog.ViaOwner})
		}
		for _, ref := range r.References {
			via := catalog.ViaBlock
			switch ref.OnTargetDelete {
			case catalog.RefBlock:
			case catalog.RefCascade:
				via = catalog.ViaCascade
			default:
				continue
			}
			uid, err := uidOf(catalog.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}, ref.UID)
			if err != nil {
				return nil, err
			}
			if uid != "" {
				n.ups = append(n.ups, up{uid, via})
			}
		}
		return n, nil
	}
	for _, it := range p.items {
		r := it.desired
		if r == nil {
			r = it.cur
		}
		if r == nil {
			continue
		}
		n, err := mk(r)
		if err != nil {
			return err
		}
		nodes[r.UID] = n
	}
	get := func(uid string) (*node, error) {
		if n, ok := nodes[uid]; ok {
			return n, nil
		}
		r, err := e.st.GetByUID(ctx, uid)
		if errors.Is(err, catalog.ErrNotFound) {
			nodes[uid] = nil // gone: no edge to follow
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		n, err := mk(r)
		nodes[uid] = n
		return n, err
	}
	for _, it := range p.items {
		if it.desired == nil {
			continue
		}
		start := it.desired.UID
		// reached[u] is the edge u → child by which the walk reached u.
		type hop struct{ child, via string }
		reached := map[string]hop{}
		frontier := []string{start}
		var closing *hop
		for len(frontier) > 0 && closing == nil {
			var next []string
			for _, uid := range frontier {
				n, err := get(uid)
				if err != nil {
					return err
				}
				if n == nil {
					continue
				}
				for _, u := range n.ups {
					if u.uid == start {
						closing = &hop{uid, u.via}
						break
					}
					if _, seen := reached[u.uid]; !seen {
						reached[u.uid] = hop{uid, u.via}
						next = append(next, u.uid)
					}
				}
				if closing != nil {
					break
				}
			}
			frontier = next
		}
		if closing == nil {
			continue
		}
		key := func(uid string) catalog.Key {
			if n := nodes[uid]; n != nil {
				return n.key
			}
			return catalog.Key{Kind: "(uid)", Name: uid}
		}
		edges := []catalog.CycleEdge{{From: key(start), To: key(closing.child), Via: closing.via}}
		for u := closing.child; u != start && len(edges) <= len(reached)+1; {
			h := reached[u]
			edges = append(edges, catalog.CycleEdge{From: key(u), To: key(h.child), Via: h.via})
			u = h.child
		}
		field := "metadata.ownerReferences"
		if edges[len(edges)-1].Via != catalog.ViaOwner {
			field = "references"
		}
		return refuse(&cycleRefusal{it.doc.Errorf(field, "%s: none of them could ever be purged", catalog.FormatCycle(edges)), &catalog.CycleError{Edges: edges}})
	}
	return nil
}

// cycleRefusal is a cycle found while planning: the document's error, and
// errors.Is(err, catalog.ErrCycle).
type cycleRefusal struct {
	doc   error
	cycle *catalog.CycleError
}

func (e *cycleRefusal) Error() string   { return e.doc.Error() }
func (e *cycleRefusal) Unwrap() []error { return []error{e.doc, e.cycle} }

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

// planPrunes finds the members a bundle owns in the catalog that its new
// spec no longer lists.
func (e *Engine) planPrunes(ctx context.Context, p *plan, b *item) error {
	if b.cur == nil || b.skipped {
		return nil
	}
	deps, err := e.st.Dependents(ctx, b.cur.UID)
	if err != nil {
		return err
	}
	for _, r := range deps {
		if it, ok := p.byKey[r.Key()]; ok && it.bundle == b {
			continue
		}
		ch := &Change{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, Bundle: b.doc.Key().String(),
			UID: r.UID, Phase: r.Phase, ResourceVersion: r.ResourceVersion, DueAt: r.DeletionDueAt}
		var others int
		for _, o := range r.Owners {
			if o.UID != b.cur.UID {
				others++
			}
		}
		delay, hasDelay := time.Duration(0), false
		if v, ok := r.Annotations[catalog.AnnotationDeletionDelay]; ok {
			d, err := backup.ParseDuration(v)
			if err != nil {
				return refuse(fmt.Errorf("%s (pruned from %s): annotation %s: %v", r.Key(), b.doc.Key(), catalog.AnnotationDeletionDelay, err))
			}
			delay, hasDelay = d, true
		}
		switch {
		case r.Phase == catalog.PhaseDeleting:
			ch.Action, ch.Reason = Deleted, "pruned earlier; Deleting"
			p.settled[ch] = true
		case r.Phase == catalog.PhaseScheduled:
			ch.Action, ch.Reason = Scheduled, "pruned earlier; counting down"
			p.settled[ch] = true
		case others > 0:
			ch.Action, ch.Reason = Released, fmt.Sprintf("pruned from its bundle; it keeps %d other owner(s)", others)
		case hasDelay:
			due := e.now().Add(delay)
			ch.Action, ch.DueAt, ch.Phase = Scheduled, &due, catalog.PhaseScheduled
			ch.Reason = fmt.Sprintf("pruned from its bundle; %s=%s", catalog.AnnotationDeletionDelay, r.Annotations[catalog.AnnotationDeletionDelay])
		default:
			ch.Action, ch.Phase, ch.Reason = Deleted, catalog.PhaseDeleting, "pruned from its bundle"
		}
		p.prunes = append(p.prunes, ch)
	}
	return nil
}

// checkPrunes asks a PruneChecker about every member to delete.
func (e *Engine) checkPrunes(ctx context.Context, p *plan) error {
	c, ok := e.pruner.(PruneChecker)
	if !ok {
		return nil
	}
	for _, ch := range p.prunes {
		if ch.Action != Deleted || p.settled[ch] {
			continue
		}
		if err := c.CheckDelete(ctx, ch.Key()); err != nil {
			return fmt.Errorf("pruning %s: %w; nothing applied", ch.Key(), err)
		}
	}
	return nil
}

// prune carries the planned prunes out.
func (e *Engine) prune(ctx context.Context, p *plan) error {
	for _, ch := range p.prunes {
		if p.settled[ch] {
			continue
		}
		k := ch.Key()
		switch ch.Action {
		case Released:
			r, err := e.st.Get(ctx, k)
			if err != nil {
				return fmt.Errorf("pruning %s: %w", k, err)
			}
			r.Owners = slices.DeleteFunc(r.Owners, func(o catalog.OwnerRef) bool { return o.Kind == manifest.KindBundle })
			if r, err = e.st.Update(ctx, r); err != nil {
				return fmt.Errorf("pruning %s: %w (apply again to finish)", k, err)
			}
			ch.ResourceVersion = r.ResourceVersion
		case Scheduled:
			r, err := e.st.Get(ctx, k)
			if err != nil {
				return fmt.Errorf("pruning %s: %w", k, err)
			}
			delay, _ := backup.ParseDuration(r.Annotations[catalog.AnnotationDeletionDelay])
			r, err = e.st.Schedule(ctx, k, catalog.ScheduleOptions{Delay: delay, Propagation: catalog.PropagationForeground,
				Reason: "pruned from " + ch.Bundle})
			if err != nil {
				return fmt.Errorf("pruning %s: %w (apply again to finish)", k, err)
			}
			ch.Phase, ch.DueAt, ch.ResourceVersion = r.Phase, r.DeletionDueAt, r.ResourceVersion
		case Deleted:
			if err := e.pruner.Delete(ctx, k); err != nil {
				return fmt.Errorf("pruning %s: %w (apply again to finish)", k, err)
			}
			if r, err := e.st.Get(ctx, k); err == nil {
				ch.Phase, ch.ResourceVersion = r.Phase, r.ResourceVersion
			} else if errors.Is(err, catalog.ErrNotFound) {
				ch.Phase = catalog.PhasePurged
			}
		}
	}
	return nil
}

// Summary is a one-line count of the actions, e.g. "2 created, 1
// unchanged".
func (r *Result) Summary() string {
	var parts []string
	for _, a := range []Action{Created, Updated, Unchanged, Adopted, Scheduled, Deleted, Released, Skipped} {
		if n := r.Count(a); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, a))
		}
	}
	return cmp.Or(strings.Join(parts, ", "), "nothing to do")
}
