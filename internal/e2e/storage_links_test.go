package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStorageLinkOutDeletesNothing is the attack of the third security
// review through the binary: the folder of a backup in the file://
// storage replaced by a symbolic link to a folder outside it that holds
// a file of the tarball's name. Deleting the backup removed that file
// and said "purged no tarball (already gone)". Now the deletion fails on
// one line naming the key, and the file outside stays.
func TestStorageLinkOutDeletesNothing(t *testing.T) {
	e := newEnv(t)
	e.create("ab", 2)
	outside := filepath.Join(t.TempDir(), "outside3")
	require.NoError(t, os.MkdirAll(outside, 0o750))
	victim := filepath.Join(outside, "ab.tar.gz")
	require.NoError(t, os.WriteFile(victim, []byte("data"), 0o600))
	folder := filepath.Dir(e.tarballPath("ab"))
	require.NoError(t, os.RemoveAll(folder))
	require.NoError(t, os.Symlink(outside, folder))

	r := e.run("backup", "delete", "ab", "--yes", "--no-plugins")
	requireOneErrorLine(t, r, "not a regular file")
	require.Contains(t, r.stderr, "backups/ab/ab.tar.gz")
	require.NotContains(t, r.stdout+r.stderr, "already gone")
	data, err := os.ReadFile(victim)
	require.NoError(t, err, "the file outside the storage was deleted")
	require.Equal(t, "data", string(data))
}

// TestStorageFIFOIsRejectedBySync: a FIFO in the file:// storage, as a
// tarball beside a valid velero-backup.json or as the velero-backup.json
// itself, hung `backup sync` for good. Now the sync reports the folder
// rejected, saying why, and finishes.
func TestStorageFIFOIsRejectedBySync(t *testing.T) {
	e := newEnv(t)
	e.writeVeleroBackup("f1", "Completed")
	tarball := filepath.Join(e.storageDir(), "backups", "f1", "f1.tar.gz")
	require.NoError(t, os.Remove(tarball))
	require.NoError(t, syscall.Mkfifo(tarball, 0o600))
	e.writeVeleroBackup("f2", "Completed")
	meta := filepath.Join(e.storageDir(), "backups", "f2", "velero-backup.json")
	require.NoError(t, os.Remove(meta))
	require.NoError(t, syscall.Mkfifo(meta, 0o600))

	action, reason, _ := e.syncResult("f1")
	require.Equal(t, "rejected", action, reason)
	require.Contains(t, reason, "FIFO")
	require.Contains(t, reason, "backups/f1/f1.tar.gz")
	action, reason, _ = e.syncResult("f2")
	require.Equal(t, "rejected", action, reason)
	require.Contains(t, reason, "FIFO")
}
