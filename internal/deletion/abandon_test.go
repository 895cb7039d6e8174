package deletion_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// TestAForcedPurgeOfAMissingTarballStillSendsItsSnapshots: the snapshot
// list is a file of its own, so when a backup's tarball is gone the
// forced purge (the abandon path) still sends each native volume snapshot
// to its plugin, as Velero still deletes a backup's snapshots when its
// tarball is missing; only the tarball's items are abandoned.
func TestAForcedPurgeOfAMissingTarballStillSendsItsSnapshots(t *testing.T) {
	ctx := context.Background()
	dir, storage, cloud := t.TempDir(), "file://"+filepath.Join(t.TempDir(), "bucket"), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "plugins"), 0o750))
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "plugins", "native-snapshots"), "../../plugins/native-snapshots")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the plugin: %s", out)
	p := openVeleroPipelineWith(t, dir, storage, nil, &pluginhost.Config{
		PluginEnv: map[string]map[string]string{"native-snapshots": {"LETHE_FAKE_CLOUD_DIR": cloud}},
	})
	putBucket(t, p.blobs)
	a := "nightly-0412"
	require.NoError(t, os.WriteFile(filepath.Join(cloud, velerotest.SnapshotID(a)), nil, 0o600))
	_, err = p.reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	require.NoError(t, p.blobs.Delete(ctx, velero.TarballKey(a)))

	plan, err := p.del.Plan(ctx, a, deletion.Options{ForcePurge: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), plan.Plugins[0].Items, "the plan sends the snapshot: %+v", plan.Plugins)

	// Its plugin blocks the snapshot (in use): the forced purge abandons
	// it, and the report lists it unsettled beside the tarball's items,
	// which cannot be named.
	lock := filepath.Join(cloud, velerotest.SnapshotID(a)+".lock")
	require.NoError(t, os.WriteFile(lock, nil, 0o600))
	rep, err := p.del.Delete(ctx, a, deletion.Options{ForcePurge: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result, "%+v", rep)
	require.Equal(t, int64(1), rep.SnapshotsSent, "%+v", rep)
	require.Equal(t, int64(len(velerotest.Items())), rep.NotSent, "only the tarball's items were never sent: %+v", rep)
	require.EqualValues(t, len(velerotest.Items())+1, rep.UnsettledCount, "%+v", rep)
	require.Len(t, rep.Unsettled, 1, "%+v", rep)
	require.Equal(t, "nativevolumesnapshots.lethe.io//pv-data", rep.Unsettled[0].ItemKey)
	require.Equal(t, "blocked", rep.Unsettled[0].Outcome)
	require.Equal(t, int64(1), rep.Counts["lethe.io/native-snapshots"].Blocked, "%+v", rep.Counts)
	calls, err := os.ReadFile(filepath.Join(cloud, "api-calls.log"))
	require.NoError(t, err, "the snapshot never reached its plugin")
	require.Equal(t, "DeleteSnapshot "+velerotest.SnapshotID(a)+" default in-use\n", string(calls))
}
