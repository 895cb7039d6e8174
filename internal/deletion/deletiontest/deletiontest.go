// Package deletiontest wires a real deletion pipeline for tests and
// benchmarks: a SQLite catalog file, backup storage (a file:// folder by
// default), and plugin binaries running as subprocesses under the plugin
// host. It also builds plugin binaries and registers backups through the
// same registry as `lethe backup create`. It fakes nothing.
package deletiontest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/registry"
)

// Build runs `go build -o out pkg` (pkg relative to the caller's working
// directory, as `go test` sets it).
func Build(out, pkg string) error {
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// Options tune New. Zero fields take defaults.
type Options struct {
	// Plugins are the plugin binaries to install (hard-linked into the
	// plugin folder under their base names).
	Plugins []string
	// StorageURL is the backup storage; a file:// folder in the temp dir
	// when empty.
	StorageURL string
	// Catalog configures the SQLite catalog (clock, poll interval).
	Catalog *catalog.Config
	// Deletion, when set, adjusts the Deleter's config before New.
	Deletion func(*deletion.Config)
	// PluginEnv is the environment configured per plugin binary (base
	// name), as pluginhost.Config.PluginEnv: plugins inherit nothing else.
	PluginEnv map[string]map[string]string
}

// Env is a wired pipeline; everything is closed in tb.Cleanup.
type Env struct {
	TB       testing.TB
	Ctx      context.Context
	Dir      string
	Store    catalog.Store
	Blobs    blobstore.Store
	Host     *pluginhost.Host
	Registry *registry.Registry
	Deleter  *deletion.Deleter
}

// New wires a pipeline in a fresh temp folder.
func New(tb testing.TB, opts Options) *Env {
	tb.Helper()
	e := &Env{TB: tb, Ctx: context.Background(), Dir: tb.TempDir()}
	st, err := drivers.Open(e.Ctx, "sqlite://"+filepath.Join(e.Dir, "lethe.db"), opts.Catalog)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	e.Store = st

	storage := opts.StorageURL
	if storage == "" {
		storage = "file://" + filepath.Join(e.Dir, "storage")
	}
	bl, err := blobstore.Open(e.Ctx, storage)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = bl.Close() })
	e.Blobs = bl

	pdir := filepath.Join(e.Dir, "plugins")
	require.NoError(tb, os.MkdirAll(pdir, 0o750))
	for _, bin := range opts.Plugins {
		require.NoError(tb, os.Link(bin, filepath.Join(pdir, filepath.Base(bin))))
	}
	h, err := pluginhost.New(&pluginhost.Config{Dir: pdir, PluginEnv: opts.PluginEnv})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = h.Close() })
	e.Host = h

	cfg := &deletion.Config{Store: st, Blobs: bl, Plugins: deletion.HostPlugins(h)}
	if opts.Catalog != nil {
		cfg.Now = opts.Catalog.Now
	}
	if opts.Deletion != nil {
		opts.Deletion(cfg)
	}
	e.Deleter, err = deletion.New(cfg)
	require.NoError(tb, err)
	rcfg := &registry.Config{Store: st, Blobs: bl, Plugins: h}
	if opts.Catalog != nil {
		rcfg.Now = opts.Catalog.Now
	}
	e.Registry, err = registry.New(rcfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = e.Deleter.Close() })
	return e
}

// AddBackup registers a backup as `lethe backup create` does, through
// the registry (digest, item counts, storage location and expected
// plugins recorded), with its expiry set to expires (which may be in the
// past). A tarball that registration refuses is stored and recorded
// without those, as if it had been replaced in storage after
// registration, so that tests can check it is refused at delete time.
func (e *Env) AddBackup(name string, tarball io.Reader, annotations map[string]string, expires *time.Time) {
	e.TB.Helper()
	data, err := io.ReadAll(tarball)
	require.NoError(e.TB, err)
	if _, err := archive.Validate(bytes.NewReader(data), archive.Limits{}); err != nil {
		spec := backup.Spec{StorageKey: backup.StorageKey(name), StorageLocation: e.Blobs.URL(), Size: int64(len(data)), ExpiresAt: expires}
		require.NoError(e.TB, e.Blobs.Put(e.Ctx, spec.StorageKey, bytes.NewReader(data)))
		b := &backup.Backup{Resource: &catalog.Resource{Kind: backup.Kind, Name: name, Annotations: annotations}, Spec: spec}
		require.NoError(e.TB, b.Encode())
		_, err = e.Store.Create(e.Ctx, b.Resource)
		require.NoError(e.TB, err)
		return
	}
	res, err := e.Registry.Create(e.Ctx, registry.Request{Name: name, Annotations: annotations, Tarball: bytes.NewReader(data)})
	require.NoError(e.TB, err)
	if expires == nil {
		return
	}
	b := res.Backup
	b.Spec.ExpiresAt = expires
	require.NoError(e.TB, b.Encode())
	_, err = e.Store.Update(e.Ctx, b.Resource)
	require.NoError(e.TB, err)
}
