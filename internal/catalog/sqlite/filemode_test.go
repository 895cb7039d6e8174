package sqlite_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/sqlite"
)

// TestCatalogFilesAreCreatedOwnerOnlyWhateverTheUmask: with umask 000, a
// new catalog and its -wal and -shm files are 0600 (SQLite alone makes
// them 0644 less the umask: 0666 here). Not parallel: the umask is the
// process's, and no parallel test runs while a serial one does.
func TestCatalogFilesAreCreatedOwnerOnlyWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	path := filepath.Join(t.TempDir(), "catalog.db")
	s, err := sqlite.Open(context.Background(), path, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p) // -wal and -shm exist while the catalog is open (migrations wrote)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "%s", p)
	}
}

// TestOpeningACatalogOthersCanReadWarns: an existing catalog whose mode
// lets group or others in draws one warning line naming it; its mode is
// left as it is. An owner-only one draws none.
func TestOpeningACatalogOthersCanReadWarns(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "catalog.db")
	open := func() string {
		var buf bytes.Buffer
		s, err := sqlite.Open(context.Background(), path, &catalog.Config{Logger: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		return buf.String()
	}
	require.Empty(t, open(), "a new catalog")
	require.Empty(t, open(), "an owner-only catalog")
	require.NoError(t, os.Chmod(path, 0o644))
	out := open()
	require.Contains(t, out, "the catalog file "+path+" can be read or written by group or others (mode 0644)")
	require.Equal(t, 1, bytes.Count([]byte(out), []byte("\n")), "one line: %q", out)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "left as it was")
}

// TestACatalogOthersCouldHavePutThereWarns: a catalog in a folder others
// can write draws one warning line, and so does one owned by another
// user in a sticky folder such as /tmp (who created it first decides what
// Lethe reads back); an owner-only folder draws none.
func TestACatalogOthersCouldHavePutThereWarns(t *testing.T) {
	t.Parallel()
	open := func(path string) string {
		var buf bytes.Buffer
		s, err := sqlite.Open(context.Background(), path, &catalog.Config{Logger: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		return buf.String()
	}
	dir := filepath.Join(t.TempDir(), "home")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.Empty(t, open(filepath.Join(dir, "lethe.db")), "an owner-only folder")

	open777 := filepath.Join(t.TempDir(), "open")
	require.NoError(t, os.Mkdir(open777, 0o700))
	require.NoError(t, os.Chmod(open777, 0o777))
	out := open(filepath.Join(open777, "lethe.db"))
	require.Contains(t, out, "the catalog's folder "+open777+" can be written by group or others")
	require.Equal(t, 1, bytes.Count([]byte(out), []byte("\n")), "one line: %q", out)

	if os.Geteuid() != 0 {
		t.Skip("giving the catalog file to another user needs root")
	}
	sticky := filepath.Join(t.TempDir(), "sticky")
	require.NoError(t, os.Mkdir(sticky, 0o700))
	require.NoError(t, os.Chmod(sticky, 0o777|os.ModeSticky))
	path := filepath.Join(sticky, "lethe.db")
	require.Empty(t, open(path), "a catalog of our own in a sticky folder")
	require.NoError(t, os.Chown(path, 65534, 65534))
	out = open(path)
	require.Contains(t, out, "the catalog file "+path+" is owned by uid 65534, not by Lethe's user")
}
