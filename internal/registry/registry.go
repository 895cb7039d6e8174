package registry

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
)

// Plugins is what registration asks of the plugin host: the plugins that
// run, and the binaries that could not be loaded.
type Plugins interface {
	Plugins() []pluginhost.Info
	Problems() []pluginhost.Problem
}

// Catalog is the part of the catalog a Registry uses.
type Catalog interface {
	catalog.Resources
	catalog.Lifecycle
	// RetryQueue: sync never imports a backup the retry queue still
	// holds rows for (live or discarded).
	catalog.RetryQueue
}

// Config configures a Registry.
type Config struct {
	Store   Catalog
	Blobs   blobstore.Store
	Plugins Plugins
	Limits  archive.Limits
	// LocationName is the name of the storage location Blobs is, recorded
	// in every backup registered (Spec.Location).
	LocationName string
	// Now is the clock; time.Now by default.
	Now func() time.Time
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("registry: Config.Store is required")
	case c.Blobs == nil:
		return errors.New("registry: Config.Blobs is required")
	case c.Plugins == nil:
		return errors.New("registry: Config.Plugins is required")
	}
	return nil
}

// Registry registers backups.
type Registry struct {
	cfg Config
}

// New returns a Registry.
func New(cfg *Config) (*Registry, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := *cfg
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Registry{cfg: c}, nil
}

// InputError is bad input to a registration: a name, a label, a TTL. The
// CLI reports it as a usage error.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// PluginProblemsError refuses a registration while some plugin binaries
// could not be loaded: the expected plugins recorded would be incomplete,
// and a later deletion would not know to wait for them.
type PluginProblemsError struct{ Problems []pluginhost.Problem }

func (e *PluginProblemsError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = describeProblem(p)
	}
	return "refusing to register: the expected plugins would be incomplete, " +
		"because these plugin binaries could not be loaded: " + strings.Join(parts, "; ") +
		"; fix or remove them (lethe plugin list)"
}

func describeProblem(p pluginhost.Problem) string {
	s := p.Binary
	if len(p.Names) > 0 {
		s += " (" + strings.Join(p.Names, ", ") + ")"
	}
	if p.Err != nil {
		s += ": " + p.Err.Error()
	}
	return s
}

// ErrAlreadyExists means a backup of that name is in the catalog, or a tarball
// for it is in storage.
var ErrAlreadyExists = errors.New("already exists")

// Request is one backup to register from a tarball.
type Request struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	// TTL is how long the backup lives; zero: it never expires.
	TTL time.Duration
	// Tarball is read twice: once to validate it, once to store it.
	Tarball io.ReadSeeker
	// Source names the tarball in errors, e.g. its path.
	Source string
}

// Result is a registered backup.
type Result struct {
	Backup *backup.Backup
	// Location is the stored tarball's URL.
	Location string
	// Warnings are what went wrong after the backup was registered.
	Warnings []string
}

// CheckInput validates what a request says about the backup, before
// anything is read or written.
func CheckInput(name string, labels map[string]string) error {
	if err := backup.ValidateNewName(name); err != nil {
		return &InputError{err}
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := backup.ValidateLabel(k, labels[k]); err != nil {
			return &InputError{err}
		}
	}
	return nil
}

// Create validates a tarball, stores it and records the backup. Bad input
// changes nothing: on any error, no tarball and no record is left behind.
func (g *Registry) Create(ctx context.Context, req Request) (*Result, error) {
	name := req.Name
	if err := CheckInput(name, req.Labels); err != nil {
		return nil, err
	}
	if req.TTL < 0 {
		return nil, &InputError{fmt.Errorf("TTL %s is negative", req.TTL)}
	}
	if err := g.checkPlugins(); err != nil {
		return nil, err
	}
	source := req.Source
	if source == "" {
		source = "tarball"
	}
	st, bl := g.cfg.Store, g.cfg.Blobs
	if _, err := st.Get(ctx, backup.Key(name)); err == nil {
		return nil, fmt.Errorf("backup %q %w", name, ErrAlreadyExists)
	} else if !errors.Is(err, catalog.ErrNotFound) {
		return nil, err
	}
	ext, err := sniff(req.Tarball)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	sc, err := g.scan(req.Tarball)
	if err != nil {
		return nil, fmt.Errorf("%s rejected: %w", source, err)
	}
	if reason, err := g.uploadInProgress(ctx, name); err != nil {
		return nil, err
	} else if reason != "" {
		return nil, fmt.Errorf("backup %q is %s: %w", name, reason, ErrAlreadyExists)
	}
	for _, k := range []string{backup.StorageKeyExt(name, backup.ExtGzip), backup.StorageKeyExt(name, backup.ExtZstd)} {
		if _, err := bl.Stat(ctx, k); err == nil {
			return nil, fmt.Errorf("storage already holds a tarball for %q at %s/%s; run 'lethe backup sync' to import it: %w",
				name, bl.URL(), k, ErrAlreadyExists)
		} else if !errors.Is(err, blobstore.ErrNotFound) {
			return nil, err
		}
	}
	// The marker goes first, so that a sync that lists the tarball finds
	// it (see UploadMarkerFile); it stays until the row is in.
	if err := g.putUploadMarker(ctx, name, g.cfg.Now()); err != nil {
		return nil, fmt.Errorf("storing the upload marker: %w", err)
	}
	res, err := g.upload(ctx, req, name, source, ext, sc)
	// The marker goes last. A create that failed removed its tarball
	// (unless the name was taken meanwhile), so the folder is no upload
	// any more either way; a marker that cannot be removed only keeps a
	// sync from importing what the catalog already holds, or an empty
	// folder.
	if derr := g.cfg.Blobs.Delete(context.WithoutCancel(ctx), UploadMarkerKey(name)); derr != nil && err == nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("could not remove the upload marker %s (a sync skips the folder while it is there; the backup is registered, so remove it by hand): %v", UploadMarkerKey(name), derr))
	}
	return res, err
}

// upload stores the validated tarball and records the backup.
func (g *Registry) upload(ctx context.Context, req Request, name, source, ext string, sc *scanned) (*Result, error) {
	st, bl := g.cfg.Store, g.cfg.Blobs
	key := backup.StorageKeyExt(name, ext)
	size, err := req.Tarball.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}
	if _, err := req.Tarball.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if err := bl.Put(ctx, key, req.Tarball); err != nil {
		_ = bl.Delete(context.WithoutCancel(ctx), key)
		return nil, fmt.Errorf("storing tarball: %w", err)
	}
	// The stored object's identity, pinned for deletions (see
	// backup.Spec.StorageVersion).
	stored, err := bl.Stat(ctx, key)
	if err != nil {
		_ = bl.Delete(context.WithoutCancel(ctx), key)
		return nil, fmt.Errorf("storing tarball: %w", err)
	}
	if stored.Size != size {
		_ = bl.Delete(context.WithoutCancel(ctx), key)
		return nil, fmt.Errorf("storing tarball: %s/%s holds %d bytes after the upload, not %d", bl.URL(), key, stored.Size, size)
	}
	now := g.cfg.Now().UTC()
	res := &catalog.Resource{Kind: backup.Kind, Name: name, Labels: req.Labels, Annotations: req.Annotations}
	b := &backup.Backup{Resource: res, Spec: g.spec(key, size, stored.Version, sc)}
	// A created backup is its tarball alone: no native volume snapshot
	// list is part of it, and recording that spares every deletion run a
	// look for one (a GET on S3).
	b.Spec.VolumeSnapshots = &backup.VolumeSnapshotsInfo{}
	if req.TTL > 0 {
		exp := now.Add(req.TTL)
		b.Spec.TTL, b.Spec.ExpiresAt = backup.Duration(req.TTL), &exp
	}
	if err := b.Encode(); err != nil {
		_ = bl.Delete(context.WithoutCancel(ctx), key)
		return nil, err
	}
	created, err := st.Create(ctx, res)
	if err != nil {
		// Remove what we stored, unless a record for this name appeared
		// meanwhile (a sync imported the tarball, or another create won):
		// then the tarball is that record's, and stays.
		if !errors.Is(err, catalog.ErrAlreadyExists) {
			_ = bl.Delete(context.WithoutCancel(ctx), key)
		}
		return nil, err
	}
	b.Resource = created
	return &Result{Backup: b, Location: blobstore.ObjectURL(bl.URL(), key)}, nil
}

// spec is what registration records about a validated tarball.
func (g *Registry) spec(key string, size int64, v blobstore.Version, sc *scanned) backup.Spec {
	return backup.Spec{
		StorageKey: key, Size: size, Digest: sc.sum.Digest, StorageVersion: v,
		Items: sc.sum.Items, CopyOnlyItems: sc.sum.CopyOnlyItems,
		StorageLocation: g.cfg.Blobs.URL(), Location: g.cfg.LocationName, ExpectedPlugins: sc.expected,
	}
}

// checkPlugins refuses to register while some plugin binary could not be
// loaded (see PluginProblemsError).
func (g *Registry) checkPlugins() error {
	if ps := g.cfg.Plugins.Problems(); len(ps) > 0 {
		return &PluginProblemsError{Problems: ps}
	}
	return nil
}

// zstdMagic starts every zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// sniff tells the tarball's compression by its magic bytes, so that a
// zstd tarball is stored as .tar.zst whatever its file is called, and
// rewinds it.
func sniff(r io.ReadSeeker) (string, error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	magic, _ := bufio.NewReaderSize(io.LimitReader(r, 16), 16).Peek(4)
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if bytes.Equal(magic, zstdMagic) {
		return backup.ExtZstd, nil
	}
	return backup.ExtGzip, nil
}
