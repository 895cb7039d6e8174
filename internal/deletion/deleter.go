package deletion

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/pkg/plugin"
)

// Queue is the work queue that holds backup deletions; the key is the
// backup's UID.
const Queue = "deletion"

// Defaults.
const (
	LeaseTTLDefault           = 30 * time.Second
	CheckpointEveryDefault    = 20000
	CheckpointIntervalDefault = time.Second
	// ReorderWindowDefault bounds how far the feeder runs ahead of the
	// watermark: about 16k finished items of 1 KiB wait at most behind
	// one slow item, a few tens of MiB.
	ReorderWindowDefault = 16384
)

// Session is one plugin's stream of items (see pluginhost.Session).
type Session interface {
	Send(ctx context.Context, it pluginhost.Item) error
	Results() <-chan pluginhost.Result
	CloseSend()
	Close()
}

// Plugins is the set of plugins the pipeline drives.
type Plugins interface {
	// Plugins lists the plugins, sorted by name.
	Plugins() []pluginhost.Info
	// Open starts a session of one plugin for one backup.
	Open(ctx context.Context, name string, b plugin.Backup, opts pluginhost.SessionOptions) (Session, error)
	// Problems lists the plugin binaries that could not be loaded.
	Problems() []pluginhost.Problem
}

// HostPlugins adapts a plugin host to Plugins.
func HostPlugins(h *pluginhost.Host) Plugins { return hostPlugins{h} }

type hostPlugins struct{ h *pluginhost.Host }

func (p hostPlugins) Plugins() []pluginhost.Info { return p.h.Plugins() }

func (p hostPlugins) Problems() []pluginhost.Problem { return p.h.Problems() }

func (p hostPlugins) Open(ctx context.Context, name string, b plugin.Backup, opts pluginhost.SessionOptions) (Session, error) {
	return p.h.OpenSession(ctx, name, b, opts)
}

// Catalog is the part of the catalog a Deleter uses.
type Catalog interface {
	catalog.Resources
	catalog.Lifecycle
	catalog.WorkQueue
	catalog.Progress
	catalog.Graph
	catalog.Audit
}

// Config configures a Deleter.
type Config struct {
	Store Catalog
	// Blobs is the configured backup storage: backups registered without
	// a storage location live there.
	Blobs blobstore.Store
	// Locations opens the storage location each backup recorded at
	// registration; by default a blobstore.Locations around Blobs, whose
	// other stores Deleter.Close closes.
	Locations *blobstore.Locations
	Plugins   Plugins
	Logger    hclog.Logger
	// Now is the clock; time.Now by default.
	Now func() time.Time
	// Holder names this process in leases; "<host> pid <pid>" by default.
	Holder   string
	LeaseTTL time.Duration
	// Checkpoints are written every CheckpointEvery settled items or every
	// CheckpointInterval, whichever comes first.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	// ReorderWindow is the most ordinals the feeder may run ahead of the
	// watermark (the first item not yet settled). Items finish out of
	// order; those past a slow item wait for it in memory, so this bounds
	// the memory one slow item (up to the item timeout) can hold.
	ReorderWindow int
	Limits        archive.Limits
	Session       pluginhost.SessionOptions
	// Retry is the retry queue where the failed and blocked items of a
	// run wait (see retryqueue.go); by default a queue with the default
	// policy over Store.
	Retry *retry.Queue
}

func (c *Config) withDefaults() *Config {
	out := *c
	out.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.Holder == "" {
		out.Holder = defaultHolder()
	}
	out.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	out.CheckpointEvery = cmp.Or(c.CheckpointEvery, CheckpointEveryDefault)
	out.CheckpointInterval = cmp.Or(c.CheckpointInterval, CheckpointIntervalDefault)
	out.ReorderWindow = cmp.Or(c.ReorderWindow, ReorderWindowDefault)
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("deletion: Config.Store is required")
	case c.Blobs == nil:
		return errors.New("deletion: Config.Blobs is required")
	case c.Plugins == nil:
		return errors.New("deletion: Config.Plugins is required")
	case c.LeaseTTL < time.Second:
		return errors.New("deletion: Config.LeaseTTL must be at least 1s")
	case c.ReorderWindow < 1:
		return errors.New("deletion: Config.ReorderWindow must be at least 1")
	}
	return nil
}

// Deleter deletes backups.
type Deleter struct {
	cfg *Config
	log hclog.Logger
	// ownLocations is set when New made cfg.Locations.
	ownLocations bool
	hooks        testHooks
	// onTakeover, when set, is told of each claim that took over a lease
	// another holder let expire (see OnTakeover).
	onTakeover atomic.Pointer[func(w *catalog.WorkItem)]
}

// OnTakeover sets fn to be told of each claim of a deletion that took
// over a lease another holder let expire, or left behind when it died
// (the server counts them in lethe_lease_takeovers_total).
func (d *Deleter) OnTakeover(fn func(w *catalog.WorkItem)) { d.onTakeover.Store(&fn) }

func (d *Deleter) tookOver(w *catalog.WorkItem) {
	if fn := d.onTakeover.Load(); fn != nil && w != nil && w.TakenOverFrom != "" {
		(*fn)(w)
	}
}

// testHooks let tests step the pipeline deterministically; all nil in
// production (see export_test.go).
type testHooks struct {
	renewTick   <-chan time.Time
	settled     func(ordinal int64)
	feederWaits func(ordinal, watermark int64)
	// beforePurgeKey is called before each storage key a purge deletes.
	beforePurgeKey func(key string)
}

// New returns a Deleter.
func New(cfg *Config) (*Deleter, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := c.defaultRetry(); err != nil {
		return nil, err
	}
	d := &Deleter{cfg: c, log: c.Logger.Named("deletion")}
	if c.Locations == nil {
		c.Locations, d.ownLocations = blobstore.NewLocations(c.Blobs, nil), true
	}
	return d, nil
}

// Close closes the storage locations the Deleter opened itself (not
// Config.Blobs, nor a Config.Locations it was given).
func (d *Deleter) Close() error {
	if d.ownLocations {
		return d.cfg.Locations.Close()
	}
	return nil
}

// Options tune one deletion request.
//
// The acting user is not an option: it travels in ctx (catalog.WithActor),
// "cli" when ctx names none for a request or an undelete, "lethe" for the
// finalizer removal and purge of a run.
type Options struct {
	Reason string
	// Force skips the grace window.
	Force bool
	// OnlyIfScheduled moves the backup on only if it is Scheduled when the
	// write happens (the grace-window timer): an undeleted backup stays.
	OnlyIfScheduled bool
	// Unattended marks a request of the daemon (TTL expiry, the end of a
	// grace window, a queued deletion it runs): a missing or replaced tarball does not stop it. The
	// backup moves on as asked, and its deletion waits, parked with the
	// TarballMissing or TarballReplaced condition, for an operator: the
	// problem is raised once instead of on every retry.
	Unattended bool
	// ForcePurge purges the backup even if items are still failed or
	// blocked after this run, were at a skipped plugin, or if its tarball
	// is missing or replaced so that no plugin can run: the operator's
	// explicit way past unfinished plugin actions (the abandon path),
	// audited as a force-purge with every item not settled and the skipped
	// plugins. The CLI sets it only for --abandon; --force never implies it.
	ForcePurge bool
	// SkipPlugins are plugins gone for good that this deletion runs
	// without (see CheckPlugins): plugins the backup expects, or plugins
	// installed after its registration, and removed since, at which items
	// are failed or blocked. Their items are abandoned, so it needs
	// ForcePurge to purge.
	SkipPlugins []string
	// skipped are the plugins of SkipPlugins, with the items each would
	// have received, as checkPlugins found them at the start of a run.
	skipped map[string]backup.ExpectedPlugin
	// NoPlugins says that running with no plugin installed at all is
	// intended; audited on the purge.
	NoPlugins bool
	// Delay, when set, overrides the backup's deletion-delay annotation
	// and DefaultDelay.
	Delay        *time.Duration
	DefaultDelay time.Duration
	// Async only requests the deletion: the backup moves to Deleting (or
	// Scheduled) and a work item is queued for the daemon.
	Async bool
	// Progress, when set, is called as items settle.
	Progress func(Progress)
	// Propagation is what happens to the backup's dependents (resources
	// whose owner it is): Foreground (the default) purges the backup only
	// once no dependent with blockOwnerDeletion remains; Background and
	// Orphan do not wait for them (see Held). The garbage collector
	// (internal/gc) carries the cascade out.
	Propagation catalog.Propagation
}

// Progress is a snapshot of a running deletion.
type Progress struct {
	Processed int64
	Total     int64
}

// Result says how a deletion request ended.
type Result string

// The results of Delete.
const (
	ResultScheduled  Result = "scheduled"  // in the grace window
	ResultQueued     Result = "queued"     // Deleting, left to the daemon
	ResultPurged     Result = "purged"     // gone
	ResultIncomplete Result = "incomplete" // some items failed or are blocked
	// ResultNotScheduled: OnlyIfScheduled was set and the backup is not
	// Scheduled (it was undeleted); nothing changed.
	ResultNotScheduled Result = "not-scheduled"
	// ResultWaiting: every item is settled, but the backup is not purged
	// yet: its cascade holds it (dependents with blockOwnerDeletion under
	// Foreground, block referrers, or finalizers; Report.WaitingFor). The
	// garbage collector purges it once they are gone.
	ResultWaiting Result = "waiting"
)

// Report is the outcome of a deletion request.
type Report struct {
	Backup string
	Result Result
	DueAt  time.Time
	// TotalItems is the number of unique items in the tarball.
	TotalItems int64
	// Counts are the settled outcomes by plugin.
	Counts map[string]catalog.OutcomeCount
	// Unsettled are the failed and blocked items (at most 20).
	Unsettled []catalog.ItemOutcome
	// UnsettledCount counts every item not settled as done or skipped:
	// the failed and blocked ones, plus, when the tarball is gone or
	// replaced, NotSent.
	UnsettledCount int
	// NotSent counts the items that never reached a plugin because the
	// tarball was missing or replaced (a forced purge only).
	NotSent int64
	// TarballProblem says why no plugin could run on a forced purge:
	// the tarball is missing or replaced. Empty otherwise.
	TarballProblem string
	// SnapshotsProblem says why the native volume snapshots the backup
	// recorded were abandoned on a forced purge (their list is unusable;
	// they count in NotSent). Empty otherwise.
	SnapshotsProblem string `json:",omitempty"`
	// SnapshotsSent counts the native volume snapshots sent to their
	// plugins on a forced purge whose tarball is missing or replaced:
	// their list is a file of its own, so they still reach their
	// plugins, and only those not settled are abandoned.
	SnapshotsSent int64 `json:",omitempty"`
	// Purged lists what was purged, e.g. the tarball's URL and the record.
	Purged []string
	// Forced is set when the backup was purged with items unsettled
	// (Options.ForcePurge).
	Forced bool
	// Skipped are the plugins skipped by Options.SkipPlugins, with the
	// items each would have received.
	Skipped map[string]backup.ExpectedPlugin `json:",omitempty"`
	// WaitingFor says what holds a ResultWaiting backup in Deleting.
	WaitingFor []string `json:",omitempty"`
	// Warnings name the plugins that received the backup's items although
	// they were not installed when it was registered, and the binaries
	// the plugin lock file does not list (they received none).
	Warnings []string `json:",omitempty"`
}

func (d *Deleter) now() time.Time { return d.cfg.Now().UTC() }

// ErrTarballMissing means a backup's tarball is not in its storage location.
var ErrTarballMissing = errors.New("tarball missing")

// ErrTarballReplaced means the object at a backup's storage key is not
// the tarball registered (its sha256 differs from the recorded digest).
var ErrTarballReplaced = errors.New("tarball replaced")

// tarballUnusable reports whether err says that no plugin can run on the
// backup's items because its tarball is missing or replaced: only the
// abandon path (Options.ForcePurge) gets past it.
func tarballUnusable(err error) bool {
	return errors.Is(err, ErrTarballMissing) || errors.Is(err, ErrTarballReplaced)
}

// Stuck reports whether the named backup is Deleting and cannot finish on
// its own: failed or blocked items left by an earlier run (how many), or
// its tarball missing from storage or replaced while plugins still had to
// run.
func (d *Deleter) Stuck(ctx context.Context, name string) (bool, int, error) {
	b, err := d.get(ctx, name)
	if err != nil || b.Resource.Phase != catalog.PhaseDeleting {
		return false, 0, err
	}
	_, rows, err := d.cfg.Store.LoadProgress(ctx, b.Resource.UID)
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return false, 0, err
	}
	if len(rows) > 0 {
		return true, len(rows), nil
	}
	if !slices.Contains(b.Resource.Finalizers, catalog.FinalizerDeleteActions) {
		return false, 0, nil
	}
	if slices.ContainsFunc(b.Resource.Conditions, func(c catalog.Condition) bool {
		return c.Status == "True" && backup.ParksDeletion(c.Type)
	}) {
		return true, 0, nil
	}
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return false, 0, err
	}
	if _, err := bl.Stat(ctx, b.Spec.StorageKey); errors.Is(err, blobstore.ErrNotFound) {
		return true, 0, nil
	}
	return false, 0, nil
}

// blobsFor opens the storage location the backup was registered in (the
// configured storage for a backup that recorded none), once checkStorage
// has found that its row names its own storage: every read and delete of
// a deletion goes through here.
func (d *Deleter) blobsFor(ctx context.Context, b *backup.Backup) (blobstore.Store, error) {
	if err := d.checkStorage(b); err != nil {
		return nil, err
	}
	bl, err := d.cfg.Locations.Open(ctx, b.Spec.StorageLocation)
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
	}
	return bl, nil
}

// tarballURL is where the backup's tarball is, for messages and plugins.
func (d *Deleter) tarballURL(ctx context.Context, b *backup.Backup) string {
	loc := d.cfg.Blobs.URL()
	if bl, err := d.cfg.Locations.Open(ctx, b.Spec.StorageLocation); err == nil {
		loc = bl.URL()
	} else if l, err := blobstore.Location(b.Spec.StorageLocation); err == nil {
		loc = l
	}
	return blobstore.ObjectURL(loc, b.Spec.StorageKey)
}

// Holder is the name this Deleter uses in leases.
func (d *Deleter) Holder() string { return d.cfg.Holder }

// Delete requests the deletion of the named backup and, unless it is
// scheduled or Async is set, runs it to the end.
//
// The tarball is validated before anything changes: a hostile or corrupt
// tarball returns an error and leaves the backup as it was.
func (d *Deleter) Delete(ctx context.Context, name string, opts Options) (*Report, error) {
	b, err := d.get(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := checkFinished(b); err != nil {
		return nil, err
	}
	if err := d.checkWritable(b); err != nil {
		return nil, err
	}
	if err := d.checkBlocked(ctx, b.Resource, opts); err != nil {
		return nil, err
	}
	if _, err := d.startCheck(ctx, b, opts); err != nil {
		return nil, err
	}
	if b.Resource.Phase != catalog.PhaseDeleting {
		_, err := d.validate(ctx, b)
		d.noteTarball(ctx, b, err, opts)
		// A tarball that is missing or replaced stops everything but the
		// abandon path, which purges without plugins (see run), and the
		// daemon, whose deletion then waits for an operator.
		if err != nil && !((opts.ForcePurge || opts.Unattended) && tarballUnusable(err)) {
			return nil, err
		}
		// So is a list of native volume snapshots that cannot be used
		// (the abandon path goes on without it).
		if err == nil && !opts.ForcePurge {
			if _, err := d.loadSnapshots(ctx, b, false); err != nil {
				return nil, err
			}
		}
	}
	// Another process may move the backup between our read and our write
	// (two deletes started together): the catalog refuses the stale
	// transition, and we look again.
	var queued bool
	for attempt := 1; ; attempt++ {
		rep, q, err := d.request(ctx, b, opts)
		if errors.Is(err, catalog.ErrInvalidTransition) && attempt < 3 {
			if b, err = d.get(ctx, name); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil || rep != nil {
			return rep, err
		}
		queued = q
		break
	}
	// A backup that was Deleting already (a deletion resumed) may have no
	// work item: queue one, without the leader's fence. Queueing is
	// idempotent, and a deletion runs only for a Deleting backup. A
	// request that moved the backup to Deleting queued its work item in
	// the same transaction.
	if !queued {
		qctx := catalog.WithLeaderFence(ctx, nil)
		if _, err := d.cfg.Store.Enqueue(qctx, catalog.WorkItem{Queue: Queue, Key: b.Resource.UID, RunAt: d.now()}); err != nil {
			return nil, err
		}
	}
	if opts.Async {
		return &Report{Backup: name, Result: ResultQueued}, nil
	}
	return d.Run(ctx, name, opts)
}

// request moves the backup on: to Scheduled when it has a grace window
// (the returned report says so), or to Deleting (nil report: run it),
// queueing its work item in the same write (queued).
func (d *Deleter) request(ctx context.Context, b *backup.Backup, opts Options) (_ *Report, queued bool, _ error) {
	r := b.Resource
	ctx = catalog.WithDefaultActor(ctx, "cli")
	reason := cmp.Or(opts.Reason, "deletion requested")
	if opts.NoPlugins && len(d.cfg.Plugins.Plugins()) == 0 {
		reason += " with --no-plugins: no plugin is installed"
	}
	if opts.OnlyIfScheduled && r.Phase != catalog.PhaseScheduled {
		return &Report{Backup: r.Name, Result: ResultNotScheduled}, false, nil
	}
	switch r.Phase {
	case catalog.PhaseDeleting:
		return nil, false, nil
	case catalog.PhaseActive:
		var delay time.Duration
		if opts.Delay != nil {
			delay = *opts.Delay
		} else {
			var err error
			if delay, err = backup.DeletionDelay(r, opts.DefaultDelay); err != nil {
				return nil, false, err
			}
		}
		if delay > 0 && !opts.Force {
			r, err := d.cfg.Store.Schedule(ctx, r.Key(), catalog.ScheduleOptions{Delay: delay, Propagation: opts.Propagation, Reason: reason})
			if err != nil {
				return nil, false, err
			}
			return &Report{Backup: r.Name, Result: ResultScheduled, DueAt: *r.DeletionDueAt}, false, nil
		}
	case catalog.PhaseScheduled:
		if !opts.Force && r.DeletionDueAt != nil && d.now().Before(*r.DeletionDueAt) {
			return &Report{Backup: r.Name, Result: ResultScheduled, DueAt: *r.DeletionDueAt}, false, nil
		}
	}
	// The cascade finalizer holds the record until its dependents and
	// referrers are handled (see Held): the same finalizers as the
	// collector gives a Backup it moves to Deleting.
	_, err := d.cfg.Store.Delete(ctx, r.Key(), catalog.DeleteOptions{
		Finalizers: Finalizers, Force: opts.Force, OnlyIfScheduled: opts.OnlyIfScheduled,
		Propagation: opts.Propagation, Reason: reason, Enqueue: Queue,
	})
	return nil, err == nil, err
}

// Finalizers are the finalizers a backup gets when it enters Deleting:
// the pipeline's own (its items), and the cascade's (its dependents and
// referrers, carried out by the garbage collector).
var Finalizers = []string{catalog.FinalizerDeleteActions, catalog.FinalizerCascade}

// Undelete cancels a scheduled deletion (see the package function).
func (d *Deleter) Undelete(ctx context.Context, name string) (*catalog.Resource, error) {
	r, _, err := Undelete(ctx, d.cfg.Store, name, d.now())
	return r, err
}

// UndeleteCatalog is the part of the catalog Undelete uses.
type UndeleteCatalog interface {
	catalog.Resources
	catalog.Lifecycle
}

// AnnotationTTLCleared records when undelete removed an expired TTL.
const AnnotationTTLCleared = "lethe.io/ttl-cleared-by-undelete"

// Undelete returns a Scheduled backup to Active. A backup whose TTL has
// already expired loses its expiry first (ttlCleared), or the TTL
// controller would request its deletion again at once: the person who
// undeleted it wants it kept. It needs no plugins.
func Undelete(ctx context.Context, st UndeleteCatalog, name string, now time.Time) (r *catalog.Resource, ttlCleared bool, err error) {
	ctx = catalog.WithDefaultActor(ctx, "cli")
	for range 3 {
		if r, err = backup.Get(ctx, st, backup.Key(name)); err != nil {
			return nil, false, err
		}
		switch r.Phase {
		case catalog.PhaseActive:
			return nil, false, fmt.Errorf("backup %s has no deletion scheduled", name)
		case catalog.PhaseDeleting:
			return nil, false, fmt.Errorf("backup %s is already being deleted (since %s): its plugins have acted, so it cannot be undeleted",
				name, r.DeletionTimestamp.Local().Format(time.RFC3339))
		}
		b, err := backup.FromResource(r)
		if err != nil {
			return nil, false, err
		}
		policy, err := scheduledByPolicy(ctx, st, r)
		if err != nil {
			return nil, false, err
		}

		expired := b.Spec.ExpiresAt != nil && !b.Spec.ExpiresAt.After(now)
		if !expired && policy == "" {
			r, err = st.Undelete(ctx, r.Key(), "undelete requested")
			return r, false, err
		}
		reason := "undelete requested"
		if expired {
			b.Spec.ExpiresAt, b.Spec.TTL = nil, 0
			if r.Annotations == nil {
				r.Annotations = map[string]string{}
			}
			r.Annotations[AnnotationTTLCleared] = now.UTC().Format(time.RFC3339)
			if err := b.Encode(); err != nil {
				return nil, false, err
			}
			reason += "; the expired TTL was removed"
		}
		if policy != "" {
			holdFromPolicy(r, policy, now)
			reason += "; held from RetentionPolicy " + policy + " (lethe.io/retain=true), which had scheduled it"
		}
		if _, err = st.Update(ctx, r); errors.Is(err, catalog.ErrConflict) {
			continue
		} else if err != nil {
			return nil, false, err
		}
		r, err = st.Undelete(ctx, r.Key(), reason)
		return r, expired, err
	}
	return nil, false, fmt.Errorf("backup %s: %w", name, catalog.ErrConflict)
}

func (d *Deleter) get(ctx context.Context, name string) (*backup.Backup, error) {
	r, err := backup.Get(ctx, d.cfg.Store, backup.Key(name))
	if err != nil {
		return nil, err
	}
	return backup.FromResource(r)
}

// validate checks the tarball before anything changes, in the storage
// location the backup recorded, without reading it when it can: the one
// read of a deletion is the pass that feeds the plugins, which is pinned
// to the object registered (see openItems), hashes as it streams and
// checks the digest at the end, before anything is purged (see
// runPlugins).
//
// A backup registered with a digest must find, at its key, an object of
// the recorded size and, when one was recorded, of the recorded storage
// identity (backup.Spec.StorageVersion: an S3 ETag, a file's mtime and
// inode), so that an object put in its place, even of the same size, is
// noticed before any plugin runs. Any other object is read, pinned to the
// identity found: with another sha256 it is refused with
// ErrTarballReplaced, whatever it contains (its items are not this
// backup's); with the registered sha256 it is the registered tarball put
// back (copied, restored), and the run goes on pinned to the identity
// found, which replaces the recorded one in b (in memory). A backup
// registered without a digest has its tarball validated in full (one
// more read), and a hostile one refused. A missing tarball is
// ErrTarballMissing.
func (d *Deleter) validate(ctx context.Context, b *backup.Backup) (*archive.Summary, error) {
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return nil, err
	}
	where := blobstore.ObjectURL(bl.URL(), b.Spec.StorageKey)
	missing := func() error {
		return fmt.Errorf("backup %s: %w: %s is gone from storage; no plugin can run on its items", b.Name(), ErrTarballMissing, where)
	}
	registered := &archive.Summary{Items: b.Spec.Items, Digest: b.Spec.Digest, CopyOnlyItems: b.Spec.CopyOnlyItems}
	var found blobstore.Version
	if b.Spec.Digest != "" {
		a, err := bl.Stat(ctx, b.Spec.StorageKey)
		if errors.Is(err, blobstore.ErrNotFound) {
			return nil, missing()
		}
		if err != nil {
			return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
		}
		if (b.Spec.Size <= 0 || a.Size == b.Spec.Size) && b.Spec.StorageVersion.Matches(a.Version) {
			return registered, nil
		}
		found = a.Version
	}
	rc, err := bl.OpenVersion(ctx, b.Spec.StorageKey, found)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, missing()
	}
	if errors.Is(err, blobstore.ErrVersionMismatch) {
		return nil, fmt.Errorf("backup %s: %w: %s changed since registration, and again while it was checked (%w); "+
			"its items may not be this backup's, so no plugin runs and nothing changed", b.Name(), ErrTarballReplaced, where, err)
	}
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
	}
	defer rc.Close()
	if b.Spec.Digest == "" {
		sum, err := archive.Validate(rc, d.cfg.Limits)
		if err != nil {
			return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
		}
		return sum, nil
	}
	h := sha256.New()
	if _, err := io.CopyBuffer(h, rc, make([]byte, 1<<20)); err != nil {
		return nil, fmt.Errorf("backup %s: reading tarball %s: %w", b.Name(), where, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != b.Spec.Digest {
		return nil, d.replaced(b, where, sum)
	}
	// The registered bytes, in another object: the run reads that one.
	b.Spec.StorageVersion = found
	return registered, nil
}

// replaced is the ErrTarballReplaced error for a tarball whose sha256 is
// found.
func (d *Deleter) replaced(b *backup.Backup, where, found string) error {
	return fmt.Errorf("backup %s: %w: %s has sha256 %s, but sha256 %s was recorded at registration; "+
		"its items are not this backup's, so no plugin runs and nothing changed", b.Name(), ErrTarballReplaced, where, found, b.Spec.Digest)
}

// noteTarball records on the backup what validate found: the condition
// TarballMissing or TarballReplaced becomes True (logged once, when it
// turns True), or False again once the tarball is usable. It writes only
// when a condition changes, so repeated runs change nothing.
func (d *Deleter) noteTarball(ctx context.Context, b *backup.Backup, verr error, opts Options) {
	if verr != nil && !tarballUnusable(verr) {
		return // nothing learnt about the tarball (storage unreachable, say)
	}
	ctx = context.WithoutCancel(ctx)
	for range 3 {
		cur, err := d.cfg.Store.Get(ctx, b.Resource.Key())
		if err != nil {
			return
		}
		now := d.now()
		changed, raised := false, ""
		for _, t := range []string{backup.ConditionTarballMissing, backup.ConditionTarballReplaced} {
			want := (t == backup.ConditionTarballMissing && errors.Is(verr, ErrTarballMissing)) ||
				(t == backup.ConditionTarballReplaced && errors.Is(verr, ErrTarballReplaced))
			i := slices.IndexFunc(cur.Conditions, func(c catalog.Condition) bool { return c.Type == t })
			switch {
			case want && (i < 0 || cur.Conditions[i].Status != "True"):
				setCondition(cur, catalog.Condition{Type: t, Status: "True", Reason: t, LastTransitionTime: now,
					Message: verr.Error() + "; the daemon will not retry it: delete it again once the tarball is back, or abandon it"})
				changed, raised = true, t
			case !want && i >= 0 && cur.Conditions[i].Status == "True":
				setCondition(cur, catalog.Condition{Type: t, Status: "False", Reason: "TarballFound", LastTransitionTime: now,
					Message: "the registered tarball is in storage"})
				changed = true
			}
		}
		if !changed {
			return
		}
		_, err = d.cfg.Store.Update(ctx, cur)
		if errors.Is(err, catalog.ErrConflict) {
			continue
		}
		// The daemon says it once in its log; an operator at the CLI gets
		// the error itself, and one line is enough.
		if err == nil && raised != "" && opts.Unattended {
			d.log.Warn("backup deletion cannot run: "+raised+"; it waits for an operator (delete it again once the tarball is back, or abandon it)",
				"backup", b.Name(), "error", verr.Error())
		}
		return
	}
}

// openItems opens the tarball for the pass that feeds plugins. A tarball
// Validate accepted with no copy-only items is read without per-item
// state, so memory stays flat whatever its size.
func (d *Deleter) openItems(ctx context.Context, b *backup.Backup, sum *archive.Summary) (*archive.Reader, func(), error) {
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return nil, nil, err
	}
	// Pinned to the object registered: one swapped in since validate
	// looked is refused here, before any item reaches a plugin.
	rc, err := bl.OpenVersion(ctx, b.Spec.StorageKey, b.Spec.StorageVersion)
	if errors.Is(err, blobstore.ErrVersionMismatch) {
		return nil, nil, fmt.Errorf("backup %s: %w: %s changed since registration: %w; "+
			"its items may not be this backup's, so no plugin runs and nothing changed",
			b.Name(), ErrTarballReplaced, blobstore.ObjectURL(bl.URL(), b.Spec.StorageKey), err)
	}
	if err != nil {
		return nil, nil, err
	}
	open := archive.NewReader
	if sum.CopyOnlyItems == 0 {
		open = archive.NewVerifiedReader
	}
	ar, err := open(rc, d.cfg.Limits)
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	if !slices.ContainsFunc(d.cfg.Plugins.Plugins(), func(in pluginhost.Info) bool {
		return in.Matcher != nil && in.Matcher.HasLabelSelector()
	}) {
		ar.SkipLabels()
	}
	return ar, func() { ar.Close(); rc.Close() }, nil
}
