package deletion

import (
	"cmp"
	"context"
	"errors"
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

func (d *Deleter) now() time.Time { return d.cfg.Now().UTC() }

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

// Holder is the name this Deleter uses in leases.
func (d *Deleter) Holder() string { return d.cfg.Holder }

func (d *Deleter) get(ctx context.Context, name string) (*backup.Backup, error) {
	r, err := backup.Get(ctx, d.cfg.Store, backup.Key(name))
	if err != nil {
		return nil, err
	}
	return backup.FromResource(r)
}
