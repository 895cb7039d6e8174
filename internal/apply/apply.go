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
// catalog.WriteEach: one transaction, so they commit together or not at
// all. Bundle adoption (Undelete, then the spec) and pruning (Schedule or
// delete) are lifecycle steps after that transaction; each is atomic on
// its own and idempotent, so applying the same bundle again finishes
// whatever a crash interrupted.
//
// Files: plan.go (reading and planning each document), cycles.go (the
// cycle check of the plan), write.go (the transaction and adoption),
// prune.go (bundle members that left their bundle). An apply of tens of
// thousands of resources holds, per resource, what the plan needs and no
// more: the documents are planned a chunk at a time (a document naming
// an owner or target not planned yet is held back to the end), stored
// resources are compared with their documents as they are read and kept
// small (stored), a planned document is let go (origin), a dry run keeps
// only edges, and the write hands the catalog one resource at a time.
//
// The sync filter: a resource that is Scheduled or Deleting is never
// re-created or changed by apply, except a Scheduled member adopted by its
// own bundle. Such a resource is reported as skipped.
//
// It must not touch drivers, plugins or the collector's internals: a
// pruned member without a delay goes to a Pruner (the collector).
package apply

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

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
	// Federation, when set, stores the forward edges of references to
	// resources on peers (a manifest reference with peer:); Peers says
	// which peers the federation configuration names. Without them a
	// reference to a peer is refused.
	Federation PeerReferences
	Peers      func(name string) bool
}

// Engine applies manifests.
type Engine struct {
	st     Catalog
	pruner Pruner
	now    func() time.Time
	fed    PeerReferences
	peers  func(name string) bool
}

// New returns an Engine.
func New(cfg *Config) (*Engine, error) {
	if cfg.Store == nil {
		return nil, errors.New("apply: Config.Store is required")
	}
	e := &Engine{st: cfg.Store, pruner: cfg.Pruner, now: cfg.Now, fed: cfg.Federation, peers: cfg.Peers}
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
	// TakeDocuments lets the engine move each document's labels,
	// annotations, finalizers, spec and status into the resource it plans
	// instead of copying them (manifest.Document.TakeResource): the
	// caller does not use the documents again, and Apply clears docs'
	// entries as it goes, so that each document is let go once planned.
	// An apply of an 8 MiB file holds one copy instead of two, and not
	// all of the input at once.
	TakeDocuments bool

	// chunkTaken, in tests, is told after each document the engine takes
	// how many it has taken since it last planned a chunk.
	chunkTaken func(n int)
	// cycleStep, in tests, is told of each step of the cycle check: a
	// resource visited, or one step of a walk from a resource on a cycle.
	cycleStep func()
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

// Apply applies docs (in order; a bundle's members follow it).
func (e *Engine) Apply(ctx context.Context, docs []*manifest.Document, opts Options) (*Result, error) {
	return e.apply(ctx, len(docs), func(yield func(*manifest.Document) bool) {
		for i, d := range docs {
			if opts.TakeDocuments {
				docs[i] = nil // the plan holds it until it is planned
			}
			if !yield(d) {
				return
			}
		}
	}, opts)
}

// ApplyPacked applies the documents of docs, as Apply does. They are
// unpacked a chunk at a time as the plan takes them, and each is let go
// once planned: the apply of tens of thousands of documents never holds
// them all (Options.TakeDocuments is implied). docs is empty afterwards.
func (e *Engine) ApplyPacked(ctx context.Context, docs *manifest.Packed, opts Options) (*Result, error) {
	opts.TakeDocuments = true
	return e.apply(ctx, docs.Len(), docs.Drain(), opts)
}

func (e *Engine) apply(ctx context.Context, n int, docs iter.Seq[*manifest.Document], opts Options) (*Result, error) {
	p, err := e.plan(ctx, n, docs, opts)
	if err != nil {
		return nil, err
	}
	res := &Result{DryRun: opts.DryRun, Changes: make([]*Change, 0, len(p.items)+len(p.prunes))}
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
	p.byKey = nil // planned: the write does not look keys up (a few MiB)
	if err := e.write(ctx, p); err != nil {
		return nil, err
	}
	if err := e.adopt(ctx, p); err != nil {
		return res, err
	}
	if err := e.addPeerReferences(ctx, p); err != nil {
		return res, err
	}
	if err := e.prune(ctx, p); err != nil {
		return res, err
	}
	return res, nil
}

func refuse(err error) error { return &RefusedError{Err: err} }

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
