package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/federation"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/pkg/plugin"
)

// app opens what a command needs, once, and closes it at the end.
type app struct {
	s      Streams
	g      *globals
	aborts *abortHooks

	resolved bool
	log      hclog.Logger
	store    catalog.Store
	blobs    blobstore.Store
	// locations opens the storage locations backups recorded (blobs
	// for the configured one).
	locations *blobstore.Locations
	host      *pluginhost.Host
	queue     *retry.Queue
	// fileWake opens the catalog with catalog.Config.FileWake: a command
	// that waits on other processes' writes (get -w, status).
	fileWake bool
	// leaseTTL is the deletion lease (lethe server --lease-ttl); zero:
	// the default.
	leaseTTL time.Duration
	// sqliteCacheKiB, when set before the catalog is opened, is the SQLite
	// writer's page cache (catalog.Config.SQLiteCacheKiB).
	sqliteCacheKiB int
	// fed is the --federation file, once read (federationConfig).
	fed *federation.Config
}

func (a *app) init() error {
	if a.resolved {
		return nil
	}
	if err := a.g.resolve(a.s.Getenv); err != nil {
		return err
	}
	level := hclog.LevelFromString(a.g.logLevel)
	if level == hclog.NoLevel {
		return usageError{fmt.Errorf("--log-level %q: use error, warn, info, debug or trace", a.g.logLevel)}
	}
	a.log = hclog.New(&hclog.LoggerOptions{Name: "lethe", Level: level, Output: &logWriter{w: a.s.Err, json: a.g.logFormat == "json"}, JSONFormat: a.g.logFormat == "json"})
	a.resolved = true
	return nil
}

func (a *app) catalog(ctx context.Context) (catalog.Store, error) {
	if a.store != nil {
		return a.store, nil
	}
	if err := a.init(); err != nil {
		return nil, err
	}
	if strings.HasPrefix(a.g.store, "sqlite://") {
		if err := makeHome(a.g.home); err != nil {
			return nil, fmt.Errorf("creating home folder: %w", err)
		}
	}
	st, err := drivers.Open(ctx, a.g.store, &catalog.Config{Logger: a.log, FileWake: a.fileWake, SQLiteCacheKiB: a.sqliteCacheKiB})
	if err != nil {
		return nil, err
	}
	a.store = st
	return st, nil
}

// makeHome creates Lethe's home folder, when it does not exist, owner-only
// (0700, whatever the umask: the catalog and the lock files live in it).
// An existing folder keeps its mode.
func makeHome(dir string) error {
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700) //nolint:gosec // a folder: 0700 is owner-only
}

func (a *app) storage(ctx context.Context) (blobstore.Store, error) {
	if a.blobs != nil {
		return a.blobs, nil
	}
	if err := a.init(); err != nil {
		return nil, err
	}
	cfg := &blobstore.Config{MustExist: !a.g.storageDefault && !a.g.createStorage}
	if a.g.locs.set != nil {
		// The default location's own credentials (credentials-file).
		if c := a.g.locs.set.Default().Credentials; c != nil {
			cfg.AccessKeyID, cfg.SecretAccessKey = c.AccessKeyID, c.SecretAccessKey
		}
	}
	b, err := blobstore.OpenConfig(ctx, a.g.storage, cfg)
	if errors.Is(err, blobstore.ErrNotExist) {
		return nil, usageError{fmt.Errorf("--storage %s: the folder does not exist; check the path, or pass --create-storage to create it", termtext.Quote(a.g.storage))}
	}
	if err != nil {
		return nil, err
	}
	a.blobs = b
	return b, nil
}

// plugins starts every plugin in the plugin folder.
func (a *app) plugins(context.Context) (*pluginhost.Host, error) {
	if a.host != nil {
		return a.host, nil
	}
	if err := a.init(); err != nil {
		return nil, err
	}
	// Only the default folder, under Lethe's home, is created. A folder
	// given by --plugin-dir or LETHE_PLUGIN_DIR that does not exist is an
	// error (a typo must never mean "no plugins").
	if _, err := os.Stat(a.g.pluginDir); errors.Is(err, os.ErrNotExist) && a.g.pluginDirDefault {
		if err := makeHome(a.g.home); err != nil {
			return nil, fmt.Errorf("creating home folder: %w", err)
		}
		if err := os.MkdirAll(a.g.pluginDir, 0o750); err != nil {
			return nil, fmt.Errorf("creating plugin folder: %w", err)
		}
	}
	veleroDir := a.g.veleroPluginDir
	if _, err := os.Stat(veleroDir); errors.Is(err, os.ErrNotExist) && a.g.veleroPluginDirDefault {
		veleroDir = "" // no Velero plugins
	}
	h, err := pluginhost.New(&pluginhost.Config{
		Dir: a.g.pluginDir, VeleroDir: veleroDir, Logger: a.log,
		ItemTimeout: a.g.itemTimeoutD, PluginTimeouts: a.g.pluginTimeoutsD, KillGrace: a.g.killGraceD,
		LockFile: a.g.lockFile(), VeleroLockFile: a.g.veleroLockFile(), RequireLock: a.g.requireLock(),
		PluginEnv: a.g.trust.pluginEnvM, PluginUser: a.g.trust.pluginUser,
	})
	var envErr *pluginhost.EnvError
	if errors.As(err, &envErr) {
		return nil, usageError{err} // --plugin-env / LETHE_PLUGIN_ENV, like --plugin-timeout
	}
	if err != nil {
		return nil, err
	}
	a.aborts.add(func() { _ = h.Close() })
	a.host = h
	if err := checkPluginTimeouts(a.g.pluginTimeoutsD, h.Plugins()); err != nil {
		return nil, err
	}
	return h, nil
}

// checkPluginTimeouts refuses a --plugin-timeout for a plugin that is not
// installed: a typo would otherwise leave the real plugin on the default
// timeout, silently.
func checkPluginTimeouts(timeouts map[string]time.Duration, infos []pluginhost.Info) error {
	installed := make([]string, 0, len(infos))
	for _, in := range infos {
		installed = append(installed, in.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(timeouts)) {
		full, err := plugin.NormalizeName(name)
		if err != nil {
			return usageError{fmt.Errorf("--plugin-timeout %s: %w", name, err)}
		}
		if slices.Contains(installed, full) {
			continue
		}
		list := "none"
		if len(installed) > 0 {
			list = strings.Join(installed, ", ")
		}
		return usageError{fmt.Errorf("--plugin-timeout %s: no installed plugin is named %s (installed: %s)", name, full, list)}
	}
	return nil
}

func (a *app) deleter(ctx context.Context) (*deletion.Deleter, error) {
	st, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	bl, err := a.storage(ctx)
	if err != nil {
		return nil, err
	}
	h, err := a.plugins(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := a.storageLocations(ctx); err != nil {
		return nil, err
	}
	if err := a.g.retry.checkPluginNames(h.Plugins()); err != nil {
		return nil, err
	}
	q, err := a.retryQueue(ctx)
	if err != nil {
		return nil, err
	}
	return deletion.New(&deletion.Config{Store: st, Blobs: bl, Locations: a.locations, Plugins: deletion.HostPlugins(h), Logger: a.log, Retry: q,
		LeaseTTL: a.leaseTTL})
}

func (a *app) close() error {
	var errs []error
	if a.host != nil {
		errs = append(errs, a.host.Close())
		a.host = nil
	}
	if a.store != nil {
		errs = append(errs, a.store.Close())
		a.store = nil
	}
	if a.locations != nil {
		errs = append(errs, a.locations.Close())
		a.locations = nil
	}
	if a.blobs != nil {
		errs = append(errs, a.blobs.Close())
		a.blobs = nil
	}
	return errors.Join(errs...)
}
