package blobstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore"
)

// TestFileStoreNeverFollowsALinkOut: a folder of the store replaced by a
// symbolic link to a folder outside it (the attack: a deletion removed
// the file outside). Every operation on a key below the link is refused
// with ErrNotRegular naming the key, never ErrNotFound; the file outside
// is untouched.
func TestFileStoreNeverFollowsALinkOut(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "ab.tar.gz")
	require.NoError(t, os.WriteFile(victim, []byte("data"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "backups"), 0o700))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "backups", "ab")))
	s, err := blobstore.Open(t.Context(), fileURL(dir))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	ctx, key := t.Context(), "backups/ab/ab.tar.gz"

	refused := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, blobstore.ErrNotRegular)
		require.NotErrorIs(t, err, blobstore.ErrNotFound)
		require.Contains(t, err.Error(), key)
	}
	_, err = s.Stat(ctx, key)
	refused(err)
	_, err = s.Open(ctx, key)
	refused(err)
	_, err = s.OpenVersion(ctx, key, blobstore.Version{Inode: 1})
	refused(err)
	refused(s.Delete(ctx, key))
	refused(s.Put(ctx, key, strings.NewReader("overwritten")))
	objs, err := s.List(ctx, "backups/")
	require.NoError(t, err)
	for _, o := range objs {
		require.NotEqual(t, key, o.Key, "listed an object through the link")
	}
	data, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "data", string(data), "the file outside the store changed")

	// The object itself a link out: refused too, and the link stays.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "backups", "cd"), 0o700))
	require.NoError(t, os.Symlink(victim, filepath.Join(dir, "backups", "cd", "cd.tar.gz")))
	refused2 := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, blobstore.ErrNotRegular)
		require.Contains(t, err.Error(), "backups/cd/cd.tar.gz")
	}
	_, err = s.Stat(ctx, "backups/cd/cd.tar.gz")
	refused2(err)
	_, err = s.Open(ctx, "backups/cd/cd.tar.gz")
	refused2(err)
	refused2(s.Delete(ctx, "backups/cd/cd.tar.gz"))
	_, err = os.Stat(victim)
	require.NoError(t, err)
}

// TestFileStoreRefusesAFIFO: a FIFO at a key is listed (so that a reader
// sees it and says why), but opening it is refused at once, never blocks.
func TestFileStoreRefusesAFIFO(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "backups", "f1"), 0o700))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "backups", "f1", "f1.tar.gz"), 0o600))
	s, err := blobstore.Open(t.Context(), fileURL(dir))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	objs, err := s.List(t.Context(), "backups/")
	require.NoError(t, err)
	require.Len(t, objs, 1)
	require.Equal(t, "backups/f1/f1.tar.gz", objs[0].Key)
	done := make(chan error, 1)
	go func() {
		_, err := s.Open(t.Context(), "backups/f1/f1.tar.gz")
		done <- err
	}()
	select {
	case err := <-done:
		require.True(t, errors.Is(err, blobstore.ErrNotRegular), "%v", err)
		require.Contains(t, err.Error(), "FIFO")
	case <-time.After(5 * time.Second):
		t.Fatal("opening a FIFO blocked")
	}
	_, err = s.Stat(t.Context(), "backups/f1/f1.tar.gz")
	require.ErrorIs(t, err, blobstore.ErrNotRegular)
}
