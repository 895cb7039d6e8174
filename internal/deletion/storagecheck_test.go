package deletion_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/velero"
)

// forge rewrites the backup's row in the catalog, as anyone who can write
// the catalog can.
func (e *env) forge(name string, edit func(*backup.Backup)) {
	e.t.Helper()
	b := e.backup(name)
	edit(b)
	require.NoError(e.t, b.Encode())
	_, err := e.store.Update(e.ctx, b.Resource)
	require.NoError(e.t, err)
}

// TestARowNamingAKeyOrMetadataNotItsOwnIsRefusedAndParked is the storage
// check of the security reviews, in the deletion engine itself: a backup
// row whose storage key is not its own tarball (a key elsewhere in the
// storage, another backup's tarball) or whose velero-backup.json key is
// not its own is refused before anything is read or deleted, with the
// reason on its StorageRefused condition and a deletion-refused audit
// entry, and its work item is parked (retrying changes nothing). A row
// naming its own tarball, its own velero-backup.json, or no
// velero-backup.json key at all is not refused.
func TestARowNamingAKeyOrMetadataNotItsOwnIsRefusedAndParked(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"foreign-key", "other-tarball", "other", "foreign-metadata", "own-metadata", "no-metadata-key"} {
		e.addBackup(n, items(3), archivetest.Options{}, nil)
	}
	// Requested (Deleting, with a work item), then forged: the run checks
	// the row again.
	for _, n := range []string{"foreign-key", "other-tarball", "foreign-metadata"} {
		rep, err := e.del.Delete(e.ctx, n, deletion.Options{Async: true})
		require.NoError(t, err)
		require.Equal(t, deletion.ResultQueued, rep.Result)
	}
	storageDir := strings.TrimPrefix(e.blobs.URL(), "file://")
	important := filepath.Join(storageDir, "keep", "important")
	require.NoError(t, os.MkdirAll(filepath.Dir(important), 0o750))
	require.NoError(t, os.WriteFile(important, []byte("keep me"), 0o600))

	e.forge("foreign-key", func(b *backup.Backup) { b.Spec.StorageKey = "keep/important" })
	e.forge("other-tarball", func(b *backup.Backup) { b.Spec.StorageKey = backup.StorageKey("other") })
	e.forge("foreign-metadata", func(b *backup.Backup) {
		b.Spec.Velero = &backup.VeleroInfo{MetadataKey: "keep/important", Phase: "Completed"}
	})
	e.forge("own-metadata", func(b *backup.Backup) {
		b.Spec.Velero = &backup.VeleroInfo{MetadataKey: velero.MetadataKey("own-metadata"), Phase: "Completed"}
	})
	e.forge("no-metadata-key", func(b *backup.Backup) { b.Spec.Velero = &backup.VeleroInfo{Phase: "Completed"} })

	for n, reason := range map[string]string{"foreign-key": "ForeignStorageKey", "other-tarball": "ForeignStorageKey", "foreign-metadata": "ForeignMetadataKey"} {
		_, err := e.del.Run(e.ctx, n, deletion.Options{})
		require.ErrorIs(t, err, deletion.ErrStorageRefused, n)
		require.NotContains(t, err.Error(), "\n")
		b := e.backup(n)
		c := condition(b.Resource, deletion.ConditionStorageRefused)
		require.NotNil(t, c, "%s: no StorageRefused condition", n)
		require.Equal(t, reason, c.Reason, n)
		require.Equal(t, deletion.AuditDeletionRefused, e.lastAudit(n).Action, n)
		w, err := e.store.GetWork(e.ctx, deletion.Queue, b.Resource.UID)
		require.NoError(t, err, n)
		require.False(t, w.RunAt.Before(e.now.Add(deletion.ParkedFor-time.Minute)), "%s: parked, not retried: runs at %s", n, w.RunAt)
	}
	// By hand, on a row still Active: one line, nothing changes.
	e.forge("other", func(b *backup.Backup) { b.Spec.StorageKey = "keep/important" })
	_, err := e.del.Delete(e.ctx, "other", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrStorageRefused)
	require.Equal(t, catalog.PhaseActive, e.backup("other").Resource.Phase)
	e.forge("other", func(b *backup.Backup) { b.Spec.StorageKey = backup.StorageKey("other") })

	require.FileExists(t, important)
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey("other"))
	require.NoError(t, err, "another backup's tarball is kept")
	require.Empty(t, e.lines(), "no plugin was sent anything")

	for _, n := range []string{"own-metadata", "no-metadata-key"} {
		rep, err := e.del.Delete(e.ctx, n, deletion.Options{})
		require.NoError(t, err, n)
		require.Equal(t, deletion.ResultPurged, rep.Result, n)
		e.requirePurged(n)
	}
}
