package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// TestAbandonWithoutTarballStillSendsNativeSnapshots is issue 24 point 5
// through the binary: a Velero backup whose tarball is gone is abandoned,
// yet its native volume snapshot (listed in a file of its own) still
// reaches lethe.io/native-snapshots and is deleted from the cloud; only
// the tarball's items, which could not be sent, are abandoned. The plan,
// the report and the audit count both. A snapshot its plugin blocks is
// abandoned with the rest, counted as failed or blocked, not as never
// sent.
func TestAbandonWithoutTarballStillSendsNativeSnapshots(t *testing.T) {
	e := newEnv(t, pluginNative, pluginNoop)
	require.NoError(t, velerotest.WriteDir(e.storageDir(), velerotest.Bucket()))
	a, b := "nightly-0412", "nightly-04121"
	for _, name := range []string{a, b} {
		require.NoError(t, os.WriteFile(filepath.Join(e.cloud, velerotest.SnapshotID(name)), []byte("snapshot"), 0o600))
	}
	// The bucket's bad-metadata folder is rejected (exit 3); the rest is synced.
	if r := e.run("backup", "sync"); r.code != 3 {
		t.Fatalf("backup sync: want exit 3 (one folder rejected): %s", r)
	}
	items := int64(len(velerotest.Items()))
	for _, name := range []string{a, b} {
		require.NoError(t, os.Remove(filepath.Join(e.storageDir(), filepath.FromSlash(velero.TarballKey(name)))))
	}

	// The plan says the snapshot is still sent.
	r := e.ok("backup", "delete", a, "--abandon", "--dry-run", "-o", "json")
	var plan struct {
		Abandon struct {
			Tarball             string `json:"tarball"`
			Items               int64  `json:"items"`
			NotSent             int64  `json:"notSent"`
			VolumeSnapshotsSent int64  `json:"volumeSnapshotsSent"`
		} `json:"abandon"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &plan), r.stdout)
	require.Equal(t, "missing", plan.Abandon.Tarball)
	require.Equal(t, int64(1), plan.Abandon.VolumeSnapshotsSent)
	require.Equal(t, items, plan.Abandon.NotSent)
	require.Contains(t, e.ok("backup", "delete", a, "--abandon", "--dry-run").stdout,
		"Snapshots: 1 native volume snapshot would still be sent to their plugins")

	r = e.ok("backup", "delete", a, "--abandon", "--yes", "-o", "json")
	var rep struct {
		Result              string `json:"result"`
		TotalItems          int64  `json:"totalItems"`
		UnsettledCount      int64  `json:"unsettledCount"`
		NotSent             int64  `json:"notSent"`
		VolumeSnapshotsSent int64  `json:"volumeSnapshotsSent"`
		Counts              map[string]struct{ Done, Failed, Blocked int64 }
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Equal(t, "purged", rep.Result)
	require.Equal(t, items+1, rep.TotalItems)
	require.Equal(t, int64(1), rep.VolumeSnapshotsSent)
	require.Equal(t, items, rep.NotSent, "only the tarball's items were never sent")
	require.Equal(t, items, rep.UnsettledCount, "the snapshot settled: it is not abandoned")
	require.Equal(t, int64(1), rep.Counts["lethe.io/native-snapshots"].Done)
	require.NoFileExists(t, filepath.Join(e.cloud, velerotest.SnapshotID(a)), "the snapshot was deleted")
	require.Equal(t, []string{"DeleteSnapshot " + velerotest.SnapshotID(a) + " default deleted"}, e.cloudCalls())
	e.requirePurged(a)
	var audit []struct {
		Action  string `json:"action"`
		Details struct {
			Details map[string]any `json:"details"`
		} `json:"details"`
	}
	r = e.ok("audit", "--name", a, "-o", "json")
	var list struct{ Items json.RawMessage }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.NoError(t, json.Unmarshal(list.Items, &audit), r.stdout)
	var purge map[string]any
	for _, en := range audit {
		if en.Action == "force-purge" {
			purge = en.Details.Details
		}
	}
	require.NotNil(t, purge, r.stdout)
	require.EqualValues(t, 1, purge["volumeSnapshotsSent"])
	require.EqualValues(t, items, purge["neverSent"])
	require.EqualValues(t, items, purge["abandoned"])

	// Blocked: the snapshot is abandoned as blocked, not as never sent.
	require.NoError(t, os.WriteFile(filepath.Join(e.cloud, velerotest.SnapshotID(b)+".lock"), nil, 0o600))
	r = e.ok("backup", "delete", b, "--abandon", "--yes", "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Equal(t, "purged", rep.Result)
	require.Equal(t, items, rep.NotSent)
	require.Equal(t, items+1, rep.UnsettledCount)
	require.Equal(t, int64(1), rep.Counts["lethe.io/native-snapshots"].Blocked)
	require.FileExists(t, filepath.Join(e.cloud, velerotest.SnapshotID(b)))
	e.requirePurged(b)
}
