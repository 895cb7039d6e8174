package blobstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore"
)

// TestLocationComparesPlaces: two spellings of one place give one
// location, without credentials; different places differ.
func TestLocationComparesPlaces(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"file:///srv/backups/", "file:///srv/backups"},
		{"file:///srv/./backups", "file:///srv/backups"},
		{"s3://KEY:SECRET@bucket/prefix?region=eu-west-1&endpoint=http://127.0.0.1:9000", "s3://bucket/prefix?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=eu-west-1"},
		{"s3://KEY@bucket/prefix/", "s3://bucket/prefix"},
		{"s3://bucket/", "s3://bucket"},
	} {
		la, err := blobstore.Location(c.a)
		require.NoError(t, err, c.a)
		lb, err := blobstore.Location(c.b)
		require.NoError(t, err, c.b)
		require.Equal(t, lb, la, "%s and %s", c.a, c.b)
		require.NotContains(t, la, "SECRET")
		require.NotContains(t, la, "KEY")
	}
	a, _ := blobstore.Location("s3://bucket/a")
	b, _ := blobstore.Location("s3://bucket/b")
	require.NotEqual(t, a, b)
	_, err := blobstore.Location("ftp://host/x")
	require.Error(t, err)
}

// TestLocationsOpen: the configured store for its own location (however
// spelt), another store for another declared folder, a folder that was
// not declared is ErrUnknownLocation, and a folder that is gone is
// ErrUnavailable, not created.
func TestLocationsOpen(t *testing.T) {
	dir := t.TempDir()
	def, err := blobstore.Open(t.Context(), fileURL(filepath.Join(dir, "default")))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, def.Close()) })
	l := blobstore.NewLocations(def, nil)
	t.Cleanup(func() { require.NoError(t, l.Close()) })

	s, err := l.Open(t.Context(), "")
	require.NoError(t, err)
	require.Same(t, def, s)
	s, err = l.Open(t.Context(), fileURL(filepath.Join(dir, "default"))+"/")
	require.NoError(t, err)
	require.Same(t, def, s)

	other := filepath.Join(dir, "other")
	require.NoError(t, os.Mkdir(other, 0o700))
	_, err = l.Open(t.Context(), fileURL(other))
	require.ErrorIs(t, err, blobstore.ErrUnknownLocation, "a location that was not declared is never opened")
	require.ErrorContains(t, err, "storage location "+fileURL(other)+" is not configured")
	require.False(t, l.Known(fileURL(other)))
	l.Declare(fileURL(other))
	require.True(t, l.Known(fileURL(other)+"/"))
	s, err = l.Open(t.Context(), fileURL(other))
	require.NoError(t, err)
	require.NotSame(t, def, s)
	require.Equal(t, fileURL(other), s.URL())

	gone := filepath.Join(dir, "gone")
	l.Declare(fileURL(gone))
	_, err = l.Open(t.Context(), fileURL(gone))
	require.ErrorIs(t, err, blobstore.ErrUnavailable)
	var ue *blobstore.UnavailableError
	require.True(t, errors.As(err, &ue))
	require.Equal(t, fileURL(gone), ue.Location)
	require.NoDirExists(t, gone)

	require.NoError(t, os.RemoveAll(other))
	_, err = l.Open(t.Context(), fileURL(other))
	require.ErrorIs(t, err, blobstore.ErrUnavailable, "a folder removed after it was opened")
}
