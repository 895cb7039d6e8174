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
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
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
}

// HostPlugins adapts a plugin host to Plugins.
func HostPlugins(h *pluginhost.Host) Plugins { return hostPlugins{h} }

type hostPlugins struct{ h *pluginhost.Host }

func (p hostPlugins) Plugins() []pluginhost.Info { return p.h.Plugins() }

func (p hostPlugins) Open(ctx context.Context, name string, b plugin.Backup, opts pluginhost.SessionOptions) (Session, error) {
	return p.h.OpenSession(ctx, name, b, opts)
}

// Config configures a Deleter.
type Config struct {
	Store   catalog.Store
	Blobs   blobstore.Store
	Plugins Plugins
	Logger  hclog.Logger
	// Now is the clock; time.Now by default.
	Now func() time.Time
	// Holder names this process in leases; "<host> pid <pid>" by default.
	Holder   string
	LeaseTTL time.Duration
	// Checkpoints are written every CheckpointEvery settled items or every
	// CheckpointInterval, whichever comes first.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	Limits             archive.Limits
	Session            pluginhost.SessionOptions
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
	}
	return nil
}

// Deleter deletes backups.
type Deleter struct {
	cfg *Config
	log hclog.Logger
}

// New returns a Deleter.
func New(cfg *Config) (*Deleter, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Deleter{cfg: c, log: c.Logger.Named("deletion")}, nil
}

// Options tune one deletion request.
type Options struct {
	Actor  string
	Reason string
	// Force skips the grace window.
	Force bool
	// OnlyIfScheduled moves the backup on only if it is Scheduled when the
	// write happens (the grace-window timer): an undeleted backup stays.
	OnlyIfScheduled bool
	// ForcePurge purges the backup even if items are still failed or
	// blocked after this run: the operator's explicit way past unfinished
	// plugin actions, audited as a force-purge with the abandoned items.
	// The CLI sets it only for --force on a deletion already stuck.
	ForcePurge bool
	// Delay, when set, overrides the backup's deletion-delay annotation
	// and DefaultDelay.
	Delay        *time.Duration
	DefaultDelay time.Duration
	// Async only requests the deletion: the backup moves to Deleting (or
	// Scheduled) and a work item is queued for the daemon.
	Async bool
	// Progress, when set, is called as items settle.
	Progress func(Progress)
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
	// Unsettled are the failed and blocked items (at most 20), of
	// UnsettledCount.
	Unsettled      []catalog.ItemOutcome
	UnsettledCount int
	// Purged lists what was purged, e.g. the tarball's URL and the record.
	Purged []string
	// Forced is set when the backup was purged with items unsettled
	// (Options.ForcePurge).
	Forced bool
}

func (d *Deleter) now() time.Time { return d.cfg.Now().UTC() }

// ErrTarballMissing: a backup's tarball is not in storage.
var ErrTarballMissing = errors.New("tarball missing")

// Stuck reports whether the named backup is Deleting and cannot finish on
// its own: failed or blocked items left by an earlier run (how many), or
// its tarball gone from storage while plugins still had to run.
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
	if slices.Contains(b.Resource.Finalizers, catalog.FinalizerDeleteActions) {
		if _, err := d.cfg.Blobs.Stat(ctx, b.Spec.StorageKey); errors.Is(err, blobstore.ErrNotFound) {
			return true, 0, nil
		}
	}
	return false, 0, nil
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
	if b.Resource.Phase != catalog.PhaseDeleting {
		if _, err := d.validate(ctx, b); err != nil {
			return nil, err
		}
	}
	// Another process may move the backup between our read and our write
	// (two deletes started together): the catalog refuses the stale
	// transition, and we look again.
	for attempt := 1; ; attempt++ {
		rep, err := d.request(ctx, b, opts)
		if errors.Is(err, catalog.ErrInvalidTransition) && attempt < 3 {
			if b, err = d.get(ctx, name); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil || rep != nil {
			return rep, err
		}
		break
	}
	if _, err := d.cfg.Store.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: b.Resource.UID, RunAt: d.now()}); err != nil {
		return nil, err
	}
	if opts.Async {
		return &Report{Backup: name, Result: ResultQueued}, nil
	}
	return d.Run(ctx, name, opts)
}

// request moves the backup on: to Scheduled when it has a grace window
// (the returned report says so), or to Deleting (nil report: run it).
func (d *Deleter) request(ctx context.Context, b *backup.Backup, opts Options) (*Report, error) {
	r := b.Resource
	actor := cmp.Or(opts.Actor, "cli")
	reason := cmp.Or(opts.Reason, "deletion requested")
	if opts.OnlyIfScheduled && r.Phase != catalog.PhaseScheduled {
		return &Report{Backup: r.Name, Result: ResultNotScheduled}, nil
	}
	switch r.Phase {
	case catalog.PhaseDeleting:
		return nil, nil
	case catalog.PhaseActive:
		delay := opts.DefaultDelay
		if opts.Delay != nil {
			delay = *opts.Delay
		} else {
			var err error
			if delay, err = backup.DeletionDelay(r, opts.DefaultDelay); err != nil {
				return nil, err
			}
		}
		if delay > 0 && !opts.Force {
			r, err := d.cfg.Store.Schedule(ctx, r.Key(), catalog.ScheduleOptions{Delay: delay, Actor: actor, Reason: reason})
			if err != nil {
				return nil, err
			}
			return &Report{Backup: r.Name, Result: ResultScheduled, DueAt: *r.DeletionDueAt}, nil
		}
	case catalog.PhaseScheduled:
		if !opts.Force && r.DeletionDueAt != nil && d.now().Before(*r.DeletionDueAt) {
			return &Report{Backup: r.Name, Result: ResultScheduled, DueAt: *r.DeletionDueAt}, nil
		}
	}
	_, err := d.cfg.Store.Delete(ctx, r.Key(), catalog.DeleteOptions{
		Finalizers: []string{catalog.FinalizerDeleteActions}, Force: opts.Force, OnlyIfScheduled: opts.OnlyIfScheduled,
		Actor: actor, Reason: reason,
	})
	return nil, err
}

// Undelete cancels a scheduled deletion (see the package function).
func (d *Deleter) Undelete(ctx context.Context, name, actor string) (*catalog.Resource, error) {
	r, _, err := Undelete(ctx, d.cfg.Store, name, actor, d.now())
	return r, err
}

// AnnotationTTLCleared records when undelete removed an expired TTL.
const AnnotationTTLCleared = "lethe.io/ttl-cleared-by-undelete"

// Undelete returns a Scheduled backup to Active. A backup whose TTL has
// already expired loses its expiry first (ttlCleared), or the TTL
// controller would request its deletion again at once: the person who
// undeleted it wants it kept. It needs no plugins.
func Undelete(ctx context.Context, st catalog.Store, name, actor string, now time.Time) (r *catalog.Resource, ttlCleared bool, err error) {
	actor = cmp.Or(actor, "cli")
	for range 3 {
		if r, err = st.Get(ctx, backup.Key(name)); errors.Is(err, catalog.ErrNotFound) {
			return nil, false, fmt.Errorf("backup %q not found", name)
		} else if err != nil {
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
		if b.Spec.ExpiresAt == nil || b.Spec.ExpiresAt.After(now) {
			r, err = st.Undelete(ctx, r.Key(), actor, "undelete requested")
			return r, false, err
		}
		b.Spec.ExpiresAt, b.Spec.TTL = nil, 0
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		r.Annotations[AnnotationTTLCleared] = now.UTC().Format(time.RFC3339)
		if err := b.Encode(); err != nil {
			return nil, false, err
		}
		if _, err = st.Update(catalog.WithActor(ctx, actor), r); errors.Is(err, catalog.ErrConflict) {
			continue
		} else if err != nil {
			return nil, false, err
		}
		r, err = st.Undelete(ctx, r.Key(), actor, "undelete requested; the expired TTL was removed")
		return r, true, err
	}
	return nil, false, fmt.Errorf("backup %s: %w", name, catalog.ErrConflict)
}

func (d *Deleter) get(ctx context.Context, name string) (*backup.Backup, error) {
	r, err := d.cfg.Store.Get(ctx, backup.Key(name))
	if errors.Is(err, catalog.ErrNotFound) {
		if ts, terr := d.cfg.Store.GetTombstone(ctx, backup.Key(name)); terr == nil {
			return nil, fmt.Errorf("backup %q was purged at %s by %s", name, ts.PurgedAt.Format(time.RFC3339), ts.Actor)
		}
		return nil, fmt.Errorf("backup %q not found", name)
	}
	if err != nil {
		return nil, err
	}
	return backup.FromResource(r)
}

// validate checks the tarball before anything changes. A tarball whose
// sha256 matches the digest recorded when it was validated at create or
// sync time is the same bytes, so one hashing pass proves it; any other
// tarball is validated in full (and a hostile one refused).
func (d *Deleter) validate(ctx context.Context, b *backup.Backup) (*archive.Summary, error) {
	open := func() (io.ReadCloser, error) {
		rc, err := d.cfg.Blobs.Open(ctx, b.Spec.StorageKey)
		if errors.Is(err, blobstore.ErrNotFound) {
			return nil, fmt.Errorf("backup %s: %w: %s not found in %s", b.Name(), ErrTarballMissing, b.Spec.StorageKey, d.cfg.Blobs.URL())
		}
		if err != nil {
			return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
		}
		return rc, nil
	}
	changed := false
	if b.Spec.Digest != "" {
		rc, err := open()
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		_, err = io.CopyBuffer(h, rc, make([]byte, 1<<20))
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("backup %s: reading tarball: %w", b.Name(), err)
		}
		if hex.EncodeToString(h.Sum(nil)) == b.Spec.Digest {
			return &archive.Summary{Items: b.Spec.Items, Digest: b.Spec.Digest, CopyOnlyItems: b.Spec.CopyOnlyItems}, nil
		}
		d.log.Info("tarball differs from the one validated at create time; validating it in full", "backup", b.Name())
		changed = true
	}
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	sum, err := archive.Validate(rc, d.cfg.Limits)
	if err != nil {
		if changed {
			return nil, fmt.Errorf("backup %s: the stored tarball changed since it was registered: %w", b.Name(), err)
		}
		return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
	}
	return sum, nil
}

// openItems opens the tarball for the pass that feeds plugins. A tarball
// Validate accepted with no copy-only items is read without per-item
// state, so memory stays flat whatever its size.
func (d *Deleter) openItems(ctx context.Context, b *backup.Backup, sum *archive.Summary) (*archive.Reader, func(), error) {
	rc, err := d.cfg.Blobs.Open(ctx, b.Spec.StorageKey)
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
