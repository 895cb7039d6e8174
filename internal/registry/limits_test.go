package registry_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// TestOversizedVeleroMetadataIsRejected: a sync keeps a backup's
// velero-backup.json byte for byte in its row, so a folder whose file is
// larger than velero.MaxMetadataSize (64 KiB; a real one is a few KiB) is
// rejected with the reason, and nothing of it is stored; a real one beside
// it is imported, its file kept whole.
func TestOversizedVeleroMetadataIsRejected(t *testing.T) {
	e, _, reg := veleroEnv(t)
	ctx := catalog.WithActor(context.Background(), "cli:test")
	writeVelero(t, e, "real", "padded")
	obj := velerotest.BackupObject("padded")
	obj["metadata"].(map[string]any)["annotations"].(map[string]any)["padding"] = strings.Repeat("x", velero.MaxMetadataSize)
	big, err := json.Marshal(obj)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(storageDir(e), filepath.FromSlash(velero.MetadataKey("padded"))), big, 0o600))

	res, err := reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"real": registry.SyncImported, "padded": registry.SyncRejected}, actions(res))
	for _, r := range res {
		if r.Name == "padded" {
			require.Equal(t, "velero-backup.json is larger than 65536 bytes (a real one is a few KiB); not importing it", r.Reason)
		}
	}
	_, err = e.Store.Get(ctx, backup.Key("padded"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
	r, err := e.Store.Get(ctx, backup.Key("real"))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.Equal(t, string(velerotest.Backup("real")[velero.MetadataKey("real")]), string(b.Spec.Velero.Object))
}
