// Package blobstore stores backup tarballs: file:// (the embedded default)
// and s3://, both through gocloud.dev/blob. It knows nothing of backups or
// the catalog.
package blobstore

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound is returned when a key does not exist.
var ErrNotFound = errors.New("blobstore: not found")

// Attributes describe a stored object.
type Attributes struct {
	Key     string
	Size    int64
	ModTime time.Time
	// Version is the object's identity (Stat only; List leaves it zero).
	Version Version
}

// Store is a flat key space of objects. Keys use "/" separators.
type Store interface {
	// Put writes the object atomically: readers see all of it or none.
	Put(ctx context.Context, key string, r io.Reader) error
	// Open streams the object. ErrNotFound if missing.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// OpenVersion is Open pinned to a version Stat reported: it fails
	// with ErrVersionMismatch if another object is at key now.
	OpenVersion(ctx context.Context, key string, v Version) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (Attributes, error)
	// Delete removes the object. Deleting a missing key returns ErrNotFound.
	Delete(ctx context.Context, key string) error
	// List returns objects whose keys start with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Attributes, error)
	// URL is the store's location, credentials redacted.
	URL() string
	Close() error
}
