package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
	"github.com/lethehq/lethe/pkg/plugin/plugintest"
)

// snapshotItem is a NativeVolumeSnapshot item as Lethe makes it.
func snapshotItem(name, backupName, id, phase string) plugin.Item {
	obj := `{"apiVersion":"lethe.io/v1","kind":"NativeVolumeSnapshot","metadata":{"name":"` + name +
		`","labels":{"velero.io/backup-name":"` + backupName + `"}},"spec":{"backupName":"` + backupName +
		`","location":"default","persistentVolumeName":"` + name + `","providerVolumeID":"vol-1","volumeType":"gp3"},` +
		`"status":{"providerSnapshotID":"` + id + `","phase":"` + phase + `"}}`
	return plugin.Item{
		Group: plugin.NativeVolumeSnapshotGroup, Version: plugin.NativeVolumeSnapshotVersion,
		Resource: plugin.NativeVolumeSnapshotResource, Kind: plugin.NativeVolumeSnapshotKind,
		Name: name, Object: []byte(obj),
	}
}

func touch(t *testing.T, p string) {
	t.Helper()
	require.NoError(t, os.WriteFile(p, nil, 0o600))
}

func TestExecute(t *testing.T) {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "snap-1"))
	touch(t, filepath.Join(dir, "snap-2"))
	touch(t, filepath.Join(dir, "snap-2.lock"))
	touch(t, filepath.Join(dir, "snap-other"))
	h := &plugintest.Harness{Action: &action{dir: dir}, Backup: plugin.Backup{Name: "nightly"}}
	pv := plugintest.ItemFromJSON(t, "persistentvolumes", `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv-1"}}`)
	got := h.Run(t,
		snapshotItem("pv-1", "nightly", "snap-1", "Completed"),
		snapshotItem("pv-2", "nightly", "snap-2", "Completed"),
		snapshotItem("pv-3", "nightly", "snap-gone", "Completed"),
		snapshotItem("pv-4", "other", "snap-other", "Completed"),
		snapshotItem("pv-5", "nightly", "", "Failed"),
		snapshotItem("pv-6", "nightly", "../escape", "Completed"),
		pv,
	)
	want := []plugin.Outcome{plugin.OutcomeDone, plugin.OutcomeBlocked, plugin.OutcomeDone, plugin.OutcomeSkipped, plugin.OutcomeSkipped, plugin.OutcomeFailed}
	for i, w := range want {
		require.True(t, got[i].Selected, got[i].Item.Name)
		require.Equal(t, w, got[i].Result.Outcome, "%s: %s", got[i].Item.Name, got[i].Result.Message)
	}
	require.False(t, got[6].Selected, "a PersistentVolume is not a native volume snapshot")
	require.NoFileExists(t, filepath.Join(dir, "snap-1"))
	require.FileExists(t, filepath.Join(dir, "snap-2"))
	require.FileExists(t, filepath.Join(dir, "snap-other"), "another backup's snapshot stays")
	log, err := os.ReadFile(filepath.Join(dir, CallLog))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		"DeleteSnapshot snap-1 default deleted",
		"DeleteSnapshot snap-2 default in-use",
		"DeleteSnapshot snap-gone default not-found",
	}, strings.Split(strings.TrimSpace(string(log)), "\n"))

	// Without the fake cloud configured, every snapshot fails.
	r, err := (&plugintest.Harness{Action: &action{}, Backup: plugin.Backup{Name: "nightly"}}).
		Execute(t.Context(), snapshotItem("pv-1", "nightly", "snap-1", "Completed"))
	require.Error(t, err)
	require.Equal(t, plugin.OutcomeFailed, r.Outcome)
	require.Contains(t, r.Message, "LETHE_FAKE_CLOUD_DIR")
}

// TestConformance builds the plugin binary and checks it as the host would
// run it.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binary")
	}
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "snap-1"))
	plugintest.Conformance(t, plugintest.Build(t, "."), &plugintest.ConformanceOptions{
		Env:     []string{"LETHE_FAKE_CLOUD_DIR=" + dir},
		Plugins: []string{"lethe.io/native-snapshots"},
		Items:   []plugin.Item{snapshotItem("pv-1", "", "snap-1", "Completed")}, // Conformance sends an unnamed backup
		CheckResult: func(t testing.TB, _ string, it plugin.Item, r plugin.Result) {
			require.Equal(t, plugin.OutcomeDone, r.Outcome, "%s: %s", it.Name, r.Message)
		},
	})
	require.NoFileExists(t, filepath.Join(dir, "snap-1"))
}
