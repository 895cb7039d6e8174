package gc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/pkg/plugin"
)

// Queue is the work queue of the collector; the key is a resource's UID.
const Queue = "gc"

// BackupKind is the kind whose own items and purge belong to the backup
// deletion pipeline (internal/deletion). The collector carries a Backup's
// cascade (its dependents and referrers, under the cascade finalizer) but
// never purges it itself: once nothing holds it, Config.PurgeBackup does.
const BackupKind = "Backup"

// BackupQueue is the work queue of the backup deletion pipeline: a Backup
// the collector moves to Deleting is queued there for it.
const BackupQueue = "deletion"

// ConditionStuck is the condition a resource gets when its deletion waits
// on something that is not itself being deleted.
const ConditionStuck = "DeletionStuck"

// DefaultParallel is how many resources a collector steps at once unless
// Config.Parallel says: one per CPU this process may use
// (runtime.GOMAXPROCS), at least 2 and at most ParallelDefault. A step is
// CPU work here (decoding, plugin calls) and, with the catalog on the same
// machine, there too: more steps than CPUs only wait for one, and a step
// that waits for the CPU while it holds the catalog's write lock holds up
// every writer. Measured on 2 CPUs with PostgreSQL on the same machine,
// 4 steps at once cascaded 1M resources about 7% slower than 2.
func DefaultParallel() int {
	return max(2, min(ParallelDefault, runtime.GOMAXPROCS(0)))
}

// Defaults.
const (
	LeaseTTLDefault     = 30 * time.Second
	RecheckDefault      = 5 * time.Minute
	PollIntervalDefault = 2 * time.Second
	// ParallelDefault is the most resources a collector steps at once by
	// default; see DefaultParallel.
	ParallelDefault = 4
	// MaxInlineDepth bounds how deep one step follows a cascade in
	// process; deeper resources are queued and stepped on their own.
	MaxInlineDepth = 8
)

// Propagation says what happens to the dependents of a deleted owner.
type Propagation string

// The propagation policies, after Kubernetes.
const (
	Foreground Propagation = "Foreground"
	Background Propagation = "Background"
	Orphan     Propagation = "Orphan"
)

// ParsePropagation accepts foreground, background or orphan, in any case.
func ParsePropagation(s string) (Propagation, error) {
	switch strings.ToLower(s) {
	case "", "foreground":
		return Foreground, nil
	case "background":
		return Background, nil
	case "orphan":
		return Orphan, nil
	}
	return "", fmt.Errorf("%w: propagation %q: use foreground, background or orphan", catalog.ErrInvalid, s)
}

// Finalizers are the finalizers a non-backup resource gets when the
// collector (or anything wired through EnterDeleting) moves it to Deleting.
var Finalizers = []string{catalog.FinalizerCascade, catalog.FinalizerDeleteActions}

// Catalog is the part of the catalog the collector uses.
type Catalog interface {
	catalog.Resources
	catalog.Lifecycle
	catalog.Graph
	catalog.WorkQueue
	catalog.Feed
	catalog.Progress
	catalog.Audit
	// BackReferences says which peers hold a back-reference to a
	// resource (docs/federation.md): such a resource cannot be deleted
	// yet, and whatever waits for it is stuck.
	BackReferences(ctx context.Context, target catalog.Key) ([]*catalog.BackReference, error)
}

// Session is one plugin's stream of items (see pluginhost.Session).
type Session interface {
	Send(ctx context.Context, it pluginhost.Item) error
	Results() <-chan pluginhost.Result
	CloseSend()
	Close()
}

// Plugins is the set of DeleteItemAction plugins the collector drives.
type Plugins interface {
	// Plugins lists the plugins, sorted by name.
	Plugins() []pluginhost.Info
	// Open starts a session of one plugin.
	Open(ctx context.Context, name string, b plugin.Backup, opts pluginhost.SessionOptions) (Session, error)
}

// HostPlugins adapts a plugin host to Plugins.
func HostPlugins(h *pluginhost.Host) Plugins { return hostPlugins{h} }

type hostPlugins struct{ h *pluginhost.Host }

func (p hostPlugins) Plugins() []pluginhost.Info { return p.h.Plugins() }

func (p hostPlugins) Open(ctx context.Context, name string, b plugin.Backup, opts pluginhost.SessionOptions) (Session, error) {
	return p.h.OpenSession(ctx, name, b, opts)
}

// Backoff says how long a step that failed as a whole (the catalog
// unreachable, a plugin that cannot start) waits before the collector
// tries it again. Plugin outcomes (blocked, failed) and waits are not
// scheduled here: they are rows of the retry queue (Config.Retry).
type Backoff interface {
	Next(attempts int) time.Duration
}

// ExpBackoff doubles from Base up to Max.
type ExpBackoff struct{ Base, Max time.Duration }

// Next implements Backoff.
func (b ExpBackoff) Next(attempts int) time.Duration {
	d := cmp.Or(b.Base, time.Second)
	for i := 1; i < attempts && d < b.Max; i++ {
		d *= 2
	}
	return min(d, cmp.Or(b.Max, 5*time.Minute))
}

// Config configures a Collector.
type Config struct {
	Store Catalog
	// Plugins run on every resource that enters Deleting. Nil means no
	// plugin host, which needs NoPlugins: a missing plugin host is an
	// error, never a silent skip.
	Plugins   Plugins
	NoPlugins bool
	Logger    hclog.Logger
	Now       func() time.Time
	// Holder names this process in leases.
	Holder string
	// DeadHolder, when set, reports whether a lease holder is a process
	// known to be dead (deletion.DeadLocalHolder): its leases are taken
	// over at once instead of after they expire.
	DeadHolder func(holder string) bool
	LeaseTTL   time.Duration
	// Recheck is how long a waiting resource stays parked when no event
	// wakes it: a safety net over the change feed, on Deleting resources
	// only (never a scan of the catalog).
	Recheck time.Duration
	// PollInterval is how often the due part of the queue is claimed
	// (plugin retries, leases of dead holders).
	PollInterval time.Duration
	// Parallel is how many resources the collector steps at once
	// (default ParallelDefault, 1 for one at a time): one step's reads
	// and decoding overlap another's writes. Each step runs under the
	// lease of its own work item, as steps in different processes do.
	Parallel int
	Backoff  Backoff
	Session  pluginhost.SessionOptions
	// Retry is the retry queue: a plugin that blocked or failed on a
	// resource, and a wait on a block referrer or a user finalizer, are
	// rows of it (KindResource, KindWait), with its schedule, maximum
	// attempts and dead letters. Nil: a queue with the default policy
	// over Store (which must then be a retry.Catalog).
	Retry *retry.Queue
	// PurgeBackup purges a Deleting Backup that nothing holds any more
	// (its items settled, its cascade carried out, no block referrer, no
	// finalizer left): the backup deletion pipeline's purge
	// (deletion.Deleter.Resume), which removes its tarball too. The
	// collector never purges a Backup itself. A *catalog.LeaseHeldError
	// means another process is on it. Nil: the backup's work item on the
	// pipeline's queue is left for lethe server to run when it is due.
	PurgeBackup func(ctx context.Context, r *catalog.Resource) error
}

// Collector is the garbage collector.
type Collector struct {
	cfg Config
	st  Catalog
	log hclog.Logger

	// done remembers the resources this process purged and whose
	// dependents it handled already, so that their own change events do
	// not cost a lookup each (bounded; a miss only costs reads).
	doneMu sync.Mutex
	done   map[string]struct{}
}

const doneMax = 1 << 20

func (c *Collector) markDone(uids ...string) {
	c.doneMu.Lock()
	defer c.doneMu.Unlock()
	if c.done == nil || len(c.done)+len(uids) > doneMax {
		c.done = map[string]struct{}{}
	}
	for _, u := range uids {
		c.done[u] = struct{}{}
	}
}

// isDone reports whether uid was marked done.
func (c *Collector) isDone(uid string) bool {
	c.doneMu.Lock()
	defer c.doneMu.Unlock()
	_, ok := c.done[uid]
	return ok
}

// New returns a Collector.
func New(cfg Config) (*Collector, error) {
	if cfg.Store == nil {
		return nil, errors.New("gc: Config.Store is required")
	}
	if cfg.Plugins == nil && !cfg.NoPlugins {
		return nil, errors.New("gc: Config.Plugins is required (set NoPlugins to run without a plugin host)")
	}
	cfg.Logger = cmp.Or[hclog.Logger](cfg.Logger, hclog.NewNullLogger())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s pid %d gc", cmp.Or(host, "localhost"), os.Getpid())
	}
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, LeaseTTLDefault)
	cfg.Recheck = cmp.Or(cfg.Recheck, RecheckDefault)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.Parallel = cmp.Or(cfg.Parallel, DefaultParallel())
	if cfg.Backoff == nil {
		cfg.Backoff = ExpBackoff{Base: time.Second, Max: 5 * time.Minute}
	}
	if cfg.Retry == nil {
		st, ok := cfg.Store.(retry.Catalog)
		if !ok {
			return nil, errors.New("gc: Config.Retry is required when Config.Store is not a retry.Catalog")
		}
		q, err := retry.New(&retry.Config{Store: st, Logger: cfg.Logger, Now: cfg.Now})
		if err != nil {
			return nil, err
		}
		cfg.Retry = q
	}
	if cfg.Parallel < 1 {
		return nil, fmt.Errorf("gc: Config.Parallel must be at least 1, got %d", cfg.Parallel)
	}
	if cfg.LeaseTTL < time.Second {
		return nil, errors.New("gc: Config.LeaseTTL must be at least 1s")
	}
	return &Collector{cfg: cfg, st: cfg.Store, log: cfg.Logger.Named("gc")}, nil
}

func (c *Collector) now() time.Time { return c.cfg.Now().UTC() }

// DeleteOptions tune one deletion request.
type DeleteOptions struct {
	Propagation Propagation
	// DryRun only computes the plan.
	DryRun bool
	// Force skips a grace window (the lethe.io/deletion-delay
	// annotation): without it, a resource that carries one is Scheduled.
	Force  bool
	Reason string
	// UID, when set, is the UID the caller planned to delete: if the key
	// now holds another resource (the planned one was purged and a new
	// one of the same name created), Delete changes nothing and returns
	// a *RecreatedError.
	UID string
}

// RecreatedError says that the key holds a new resource, not the one a request
// named; the one it named is gone (its deletion is done).
type RecreatedError struct {
	Key     catalog.Key
	OldUID  string
	NewUID  string
	NewOnes catalog.Phase
}

func (e *RecreatedError) Error() string {
	return fmt.Sprintf("%s was re-created (new UID %s, %s); the one with UID %s is gone", e.Key, e.NewUID, e.NewOnes, e.OldUID)
}

// RefusedError is a direct delete of the target of block references.
type RefusedError struct {
	Key       catalog.Key
	Referrers []catalog.Key
	// Cycle, when set, is the cycle the key is on (a catalog written
	// before cycles were refused at apply): deleting the referrers first
	// cannot work either.
	Cycle []catalog.CycleEdge
}

func (e *RefusedError) Error() string {
	names := make([]string, len(e.Referrers))
	for i, k := range e.Referrers {
		names[i] = k.String()
	}
	if len(e.Cycle) > 0 {
		return fmt.Sprintf("refusing to delete %s: it is the target of block references from %s, on a %s: none of them can be deleted before the others",
			e.Key, strings.Join(names, ", "), catalog.FormatCycle(e.Cycle))
	}
	return fmt.Sprintf("refusing to delete %s: it is the target of block references from %s (delete them first, or change their onTargetDelete)",
		e.Key, strings.Join(names, ", "))
}

// Delete requests the deletion of k. It refuses at once, with a
// *RefusedError naming them, when live referrers hold block references to
// it. Otherwise it moves the resource to Deleting (or Scheduled, when it
// carries a grace window and Force is not set) with the collector's
// finalizers and queues it; the collector (Run, or Drive) does the rest.
// With DryRun nothing changes and the returned plan is the whole cascade
// (see Plan); otherwise it names the resource only.
func (c *Collector) Delete(ctx context.Context, k catalog.Key, opts DeleteOptions) (*Plan, error) {
	prop := cmp.Or(opts.Propagation, Foreground)
	if _, err := ParsePropagation(string(prop)); err != nil {
		return nil, err
	}
	r, err := c.st.Get(ctx, k)
	if err != nil {
		return nil, err
	}
	if opts.UID != "" && r.UID != opts.UID {
		return nil, &RecreatedError{Key: k, OldUID: opts.UID, NewUID: r.UID, NewOnes: r.Phase}
	}
	if r.Phase != catalog.PhaseDeleting {
		if refs, err := c.blockingReferrers(ctx, r, true); err != nil {
			return nil, err
		} else if len(refs) > 0 {
			cyc, err := c.cycleThrough(ctx, r)
			if err != nil {
				return nil, err
			}
			return nil, &RefusedError{Key: k, Referrers: refs, Cycle: cyc}
		}
	}
	if opts.DryRun {
		return c.plan(ctx, k, prop, opts.Force)
	}
	// The whole plan is a walk of the cascade: only a dry run pays for it.
	plan := &Plan{Root: k, Propagation: prop, Entries: []PlanEntry{{Resource: k, Action: ActionDelete, Phase: r.Phase, Reason: "requested (" + string(prop) + ")"}}}
	if r.Phase == catalog.PhaseDeleting {
		if opts.Force {
			// Asked again with --force: its cascade skips the grace
			// windows from now on.
			if _, err := c.markForced(ctx, r); err != nil {
				return nil, err
			}
		}
		_, err := c.st.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: r.UID, RunAt: c.now()})
		return plan, err
	}
	if r.Phase == catalog.PhaseScheduled && !opts.Force && r.DeletionDueAt != nil && r.DeletionDueAt.After(c.now()) {
		plan.ScheduledUntil = r.DeletionDueAt // still in its grace window
		return plan, nil
	}
	if d, ok := r.Annotations[catalog.AnnotationDeletionDelay]; ok && !opts.Force && r.Phase == catalog.PhaseActive {
		delay, err := time.ParseDuration(d)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: annotation %s %q: %v", catalog.ErrInvalid, k, catalog.AnnotationDeletionDelay, d, err)
		}
		if delay > 0 {
			s, err := c.st.Schedule(ctx, k, catalog.ScheduleOptions{Delay: delay, Propagation: catalog.Propagation(prop), Reason: opts.Reason})
			if err != nil {
				return nil, err
			}
			plan.ScheduledUntil = s.DeletionDueAt
			return plan, nil
		}
	}
	if opts.Force {
		// Its cascade skips the grace windows it reaches, too.
		if r, err = c.markForced(ctx, r); err != nil {
			return nil, err
		}
	}
	if _, err := c.enter(ctx, r, prop, cmp.Or(opts.Reason, "deletion requested"), opts.Force, true); err != nil {
		// A concurrent identical request moved it to Deleting first (or
		// purged it): this one joins that deletion.
		cur, gerr := c.st.Get(ctx, k)
		switch {
		case (errors.Is(err, catalog.ErrInvalidTransition) || errors.Is(err, catalog.ErrConflict)) && gerr == nil && cur.UID == r.UID && cur.Phase == catalog.PhaseDeleting:
			_, err := c.st.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: r.UID, RunAt: c.now()})
			return plan, err
		case errors.Is(gerr, catalog.ErrNotFound) && (errors.Is(err, catalog.ErrInvalidTransition) || errors.Is(err, catalog.ErrNotFound) || errors.Is(err, catalog.ErrConflict)):
			return nil, gerr
		}
		return nil, err
	}
	return plan, nil
}

// AuditCascadeDelete is the audit action of a resource a cascade moved to
// Deleting (a window it skipped under --force is a force-delete).
const AuditCascadeDelete = "cascade-delete"

// enterCascade is enter for a resource that parent's cascade reached: it
// skips a grace window only when the cascade is forced (force-delete,
// saying so), and is audited as a cascade-delete otherwise.
func (c *Collector) enterCascade(ctx context.Context, parent, d *catalog.Resource, prop Propagation, reason string) (*catalog.Resource, error) {
	return c.enterAs(ctx, d, prop, reason+skipped(parent, d), forced(parent), false, AuditCascadeDelete, rootOf(parent))
}

// enter moves r to Deleting with the collector's finalizers. With queue,
// r is queued first (so that a crash between the two leaves a queued item,
// not an untracked Deleting resource): the root of a request is. A
// dependent entered by a cascade is queued only if its inline step leaves
// it waiting (see queueLeft): until then its owner's item stands for it,
// and a start of the continuous collector queues every Deleting resource.
// A Backup is queued for the backup deletion pipeline as well, which runs
// its items and purges it. The delete-actions finalizer is set only when
// a plugin selects the resource.
func (c *Collector) enter(ctx context.Context, r *catalog.Resource, prop Propagation, reason string, force, queue bool) (*catalog.Resource, error) {
	return c.enterAs(ctx, r, prop, reason, force, queue, "", nil)
}

// enterAs is enter with the audit action, and root: the cascade's root
// (nil for a requested deletion).
func (c *Collector) enterAs(ctx context.Context, r *catalog.Resource, prop Propagation, reason string, force, queue bool, action string, root *catalog.ObjectRef) (*catalog.Resource, error) {
	opts := c.deleteOptions(r, prop, reason, force, action, root)
	now := c.now()
	if r.Kind == BackupKind {
		// The pipeline's finalizers (deletion.Finalizers): its items, and
		// its cascade, which this collector carries out.
		opts.Finalizers = []string{catalog.FinalizerDeleteActions, catalog.FinalizerCascade}
		if _, err := c.st.Enqueue(ctx, catalog.WorkItem{Queue: BackupQueue, Key: r.UID, RunAt: now}); err != nil {
			return nil, err
		}
		queue = true
	}
	if queue {
		if _, err := c.st.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: r.UID, RunAt: now}); err != nil {
			return nil, err
		}
	}
	return c.st.Delete(ctx, r.Key(), opts)
}

// deleteOptions is what enterAs asks the catalog for a resource that is
// not a Backup: the collector's finalizers (delete-actions only when a
// plugin selects it).
func (c *Collector) deleteOptions(r *catalog.Resource, prop Propagation, reason string, force bool, action string, root *catalog.ObjectRef) catalog.DeleteOptions {
	if action != "" && force && skippedWindow(r) {
		action = "" // force-delete: a window skipped
	}
	fins := []string{catalog.FinalizerCascade}
	if len(c.selecting(r)) > 0 {
		fins = Finalizers
	}
	return catalog.DeleteOptions{Propagation: catalog.Propagation(prop), Finalizers: fins, Force: force, Reason: reason, Action: action, Root: root}
}

// pendingEnter is a dependent a step moves to Deleting with the others
// of its batch (enterBatch): the options of its move, and the places
// kept for it in the step's entered resources and, when it blocks its
// owner, in its waits (-1: none).
type pendingEnter struct {
	d        *catalog.Resource
	opts     catalog.DeleteOptions
	ent, dep int
}

// enterCascadeLater is enterCascade of d, not a Backup, made by
// enterBatch with the others of the step: its places in entered and, if
// block, in deps are kept.
func (c *Collector) enterCascadeLater(pend []pendingEnter, parent, d *catalog.Resource, prop Propagation, reason string, block bool,
	entered, deps []*catalog.Resource) ([]pendingEnter, []*catalog.Resource, []*catalog.Resource) {
	p := pendingEnter{d: d, opts: c.deleteOptions(d, prop, reason+skipped(parent, d), forced(parent), AuditCascadeDelete, rootOf(parent)),
		ent: len(entered), dep: -1}
	entered = append(entered, nil)
	if block {
		p.dep = len(deps)
		deps = append(deps, nil)
	}
	return append(pend, p), entered, deps
}

// enterBatch moves the pending dependents to Deleting in one write
// (catalog DeleteMany) and fills their places: the resource as moved;
// one another step moved first (or purged) is still waited for as it is
// now (gone: not), as enterCascade's callers do.
func (c *Collector) enterBatch(ctx context.Context, pend []pendingEnter, entered, deps []*catalog.Resource) ([]*catalog.Resource, []*catalog.Resource, error) {
	if len(pend) == 0 {
		return entered, deps, nil
	}
	items := make([]catalog.DeleteItem, len(pend))
	for i, p := range pend {
		items[i] = catalog.DeleteItem{Key: p.d.Key(), Options: p.opts}
	}
	out, errs, err := c.st.DeleteMany(ctx, items)
	if err != nil {
		return nil, nil, err
	}
	if len(out) != len(pend) || len(errs) != len(pend) {
		return nil, nil, fmt.Errorf("moving %d dependents to Deleting: %d results read back", len(pend), min(len(out), len(errs)))
	}
	for i, p := range pend {
		switch {
		case errs[i] == nil && out[i] == nil:
			return nil, nil, fmt.Errorf("moving %s to Deleting: no resource read back", p.d.Key())
		case errs[i] == nil:
			entered[p.ent] = out[i]
			if p.dep >= 0 {
				deps[p.dep] = out[i]
			}
		case errors.Is(errs[i], catalog.ErrInvalidTransition):
			// Moved on meanwhile (another step moved it to Deleting):
			// still waited for; its next event wakes us.
			if p.dep >= 0 {
				cur, err := c.st.GetByUID(ctx, p.d.UID)
				switch {
				case errors.Is(err, catalog.ErrNotFound):
				case err != nil:
					return nil, nil, err
				default:
					deps[p.dep] = cur
				}
			}
		default:
			return nil, nil, errs[i]
		}
	}
	isNil := func(r *catalog.Resource) bool { return r == nil }
	return slices.DeleteFunc(entered, isNil), slices.DeleteFunc(deps, isNil), nil
}

// queueLeft queues a resource a cascade moved to Deleting that is still
// waiting after its inline step.
func (c *Collector) queueLeft(ctx context.Context, r *catalog.Resource, next time.Time) error {
	_, err := c.st.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: r.UID, RunAt: cmp.Or(next, c.now().Add(c.cfg.Recheck))})
	return err
}

// EnterDeleting wraps a catalog so that every non-backup resource it moves
// to Deleting gets the collector's finalizers: give it to whatever else
// moves resources to Deleting (the grace-window timers), so that the
// plugins run on them and their cascade holds them.
func EnterDeleting(l catalog.Lifecycle) catalog.Lifecycle { return enterDeleting{l} }

type enterDeleting struct{ catalog.Lifecycle }

func (e enterDeleting) Delete(ctx context.Context, k catalog.Key, opts catalog.DeleteOptions) (*catalog.Resource, error) {
	return e.Lifecycle.Delete(ctx, k, withFinalizers(k, opts))
}

func (e enterDeleting) DeleteMany(ctx context.Context, items []catalog.DeleteItem) ([]*catalog.Resource, []error, error) {
	items = slices.Clone(items)
	for i := range items {
		items[i].Options = withFinalizers(items[i].Key, items[i].Options)
	}
	return e.Lifecycle.DeleteMany(ctx, items)
}

// withFinalizers adds the collector's finalizers to opts, for a resource
// that is not a Backup.
func withFinalizers(k catalog.Key, opts catalog.DeleteOptions) catalog.DeleteOptions {
	if k.Kind != BackupKind {
		opts.Finalizers = slices.Clone(opts.Finalizers)
		for _, f := range Finalizers {
			if !slices.Contains(opts.Finalizers, f) {
				opts.Finalizers = append(opts.Finalizers, f)
			}
		}
	}
	return opts
}

// blockingReferrers lists the referrers holding a block reference to r;
// with liveOnly, only those not themselves Deleting.
func (c *Collector) blockingReferrers(ctx context.Context, r *catalog.Resource, liveOnly bool) ([]catalog.Key, error) {
	refs, err := c.st.Referrers(ctx, r.Key())
	if err != nil {
		return nil, err
	}
	var out []catalog.Key
	for _, x := range refs {
		if liveOnly && x.Phase == catalog.PhaseDeleting {
			continue
		}
		for _, ref := range refsTo(x, r) {
			if ref.OnTargetDelete == catalog.RefBlock {
				out = append(out, x.Key())
				break
			}
		}
	}
	return out, nil
}

// refsTo returns x's references to r (by key, and by UID when the
// reference names one).
func refsTo(x, r *catalog.Resource) []catalog.Reference {
	var out []catalog.Reference
	for _, ref := range x.References {
		if ref.Kind == r.Kind && ref.Namespace == r.Namespace && ref.Name == r.Name && (ref.UID == "" || ref.UID == r.UID) {
			out = append(out, ref)
		}
	}
	return out
}

// ownerEdge returns d's owner reference to uid, or nil.
func ownerEdge(d *catalog.Resource, uid string) *catalog.OwnerRef {
	for i := range d.Owners {
		if d.Owners[i].UID == uid {
			return &d.Owners[i]
		}
	}
	return nil
}
