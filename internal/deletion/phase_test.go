package deletion_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

func putPhase(t *testing.T, bl blobstore.Store, name, phase string) {
	t.Helper()
	obj := velerotest.BackupObject(name)
	obj["status"].(map[string]any)["phase"] = phase
	data, err := json.Marshal(obj)
	require.NoError(t, err)
	require.NoError(t, bl.Put(context.Background(), velero.MetadataKey(name), bytes.NewReader(data)))
}

// TestCascadedUnfinishedBackupWaitsForVelero pins DESIGN §10 "unfinished
// backups are never deleted" on the path that does not go through a
// deletion request: a backup a cascade moved to Deleting while Velero
// still writes it is not run (no plugin, nothing purged), and a sync
// still reads its phase, so that its deletion goes on once Velero has
// finished it.
func TestCascadedUnfinishedBackupWaitsForVelero(t *testing.T) {
	ctx := context.Background()
	dir, storage := t.TempDir(), "file://"+filepath.Join(t.TempDir(), "bucket")
	p := openVeleroPipeline(t, dir, storage, nil)
	putBucket(t, p.blobs)
	const name = "nightly-0412"
	putPhase(t, p.blobs, name, "WaitingForPluginOperations")
	_, err := p.reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	// As the garbage collector moves a dependent backup to Deleting.
	_, err = p.store.Delete(ctx, backup.Key(name), catalog.DeleteOptions{Finalizers: deletion.Finalizers, Reason: "owner deleted"})
	require.NoError(t, err)

	_, err = p.del.Run(ctx, name, deletion.Options{NoPlugins: true})
	var ue *deletion.UnfinishedError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, "WaitingForPluginOperations", ue.Phase)
	require.ErrorContains(t, err, "(phase WaitingForPluginOperations)", "the error names the phase Velero is in")
	require.NotEmpty(t, listKeys(t, p.blobs, velero.BackupDir(name)), "nothing purged")

	putPhase(t, p.blobs, name, "Completed")
	res, err := p.reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	for _, r := range res {
		if r.Name == name {
			require.Equal(t, registry.SyncUpdated, r.Action, "%+v", r)
		}
	}
	rep, err := p.del.Run(ctx, name, deletion.Options{NoPlugins: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Empty(t, listKeys(t, p.blobs, velero.BackupDir(name)))
}
