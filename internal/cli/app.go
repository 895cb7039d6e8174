package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
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
	host     *pluginhost.Host
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
	a.log = hclog.New(&hclog.LoggerOptions{Name: "lethe", Level: level, Output: a.s.Err})
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
		if err := os.MkdirAll(a.g.home, 0o750); err != nil {
			return nil, fmt.Errorf("creating home folder: %w", err)
		}
	}
	st, err := drivers.Open(ctx, a.g.store, &catalog.Config{Logger: a.log})
	if err != nil {
		return nil, err
	}
	a.store = st
	return st, nil
}

func (a *app) storage(ctx context.Context) (blobstore.Store, error) {
	if a.blobs != nil {
		return a.blobs, nil
	}
	if err := a.init(); err != nil {
		return nil, err
	}
	b, err := blobstore.Open(ctx, a.g.storage)
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
	if _, err := os.Stat(a.g.pluginDir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(a.g.pluginDir, 0o750); err != nil {
			return nil, fmt.Errorf("creating plugin folder: %w", err)
		}
	}
	h, err := pluginhost.New(&pluginhost.Config{
		Dir: a.g.pluginDir, Logger: a.log,
		ItemTimeout: a.g.itemTimeoutD, PluginTimeouts: a.g.pluginTimeoutsD,
	})
	if err != nil {
		return nil, err
	}
	a.aborts.add(func() { _ = h.Close() })
	a.host = h
	return h, nil
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
	return deletion.New(&deletion.Config{Store: st, Blobs: bl, Plugins: deletion.HostPlugins(h), Logger: a.log})
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
	if a.blobs != nil {
		errs = append(errs, a.blobs.Close())
		a.blobs = nil
	}
	return errors.Join(errs...)
}
