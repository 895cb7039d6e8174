package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
	"github.com/lethehq/lethe/pkg/plugin/plugintest"
)

// snapshotItem is a VolumeSnapshotContent whose status.snapshotHandle is
// handle (no status at all when handle is "").
func snapshotItem(t testing.TB, name, handle string) plugin.Item {
	obj := map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1",
		"kind":       "VolumeSnapshotContent",
		"metadata":   map[string]any{"name": name},
	}
	if handle != "" {
		obj["status"] = map[string]any{"snapshotHandle": handle}
	}
	return plugintest.ItemFromObject(t, "volumesnapshotcontents", obj)
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func touch(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte("snapshot"), 0o600))
}

func TestSnapshotFiles(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	touch(t, filepath.Join(dir, "snap-a"))
	touch(t, filepath.Join(dir, "snap-locked"))
	touch(t, filepath.Join(dir, "snap-locked.lock"))
	touch(t, filepath.Join(outside, "precious"))
	rel, err := filepath.Rel(dir, filepath.Join(outside, "precious"))
	require.NoError(t, err)

	items := []plugin.Item{
		snapshotItem(t, "deletes", "snap-a"),
		snapshotItem(t, "locked", "snap-locked"),
		snapshotItem(t, "missing", "snap-gone"),
		snapshotItem(t, "no-handle", ""),
		snapshotItem(t, "escape", rel),
		snapshotItem(t, "absolute", filepath.Join(outside, "precious")),
		snapshotItem(t, "subdir", "sub/snap"),
		plugintest.ItemFromJSON(t, "volumesnapshots", `{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshot","metadata":{"name":"other-resource","namespace":"a"},"status":{"snapshotHandle":"snap-a"}}`),
	}
	want := []struct {
		selected bool
		outcome  plugin.Outcome
	}{
		{true, plugin.OutcomeDone},
		{true, plugin.OutcomeBlocked},
		{true, plugin.OutcomeDone}, // already gone: idempotent
		{true, plugin.OutcomeSkipped},
		{true, plugin.OutcomeFailed},
		{true, plugin.OutcomeFailed},
		{true, plugin.OutcomeFailed},
		{false, 0},
	}
	h := &plugintest.Harness{Action: newAction(env(map[string]string{"LETHE_SNAPSHOT_DIR": dir})), MaxConcurrency: 16}
	got := h.Run(t, items...)
	for i, w := range want {
		require.Equal(t, w.selected, got[i].Selected, items[i].Name)
		require.Equal(t, w.outcome, got[i].Result.Outcome, "%s: %s", items[i].Name, got[i].Result.Message)
	}
	require.NoFileExists(t, filepath.Join(dir, "snap-a"))
	require.FileExists(t, filepath.Join(dir, "snap-locked"), "a locked snapshot stays")
	require.FileExists(t, filepath.Join(outside, "precious"), "nothing outside the directory is touched")
	require.Equal(t, RetryAfter, got[1].Result.RetryAfter)
	require.Contains(t, got[4].Result.Message, "refusing")

	// Once the lock is gone, the blocked item goes through.
	require.NoError(t, os.Remove(filepath.Join(dir, "snap-locked.lock")))
	res, err := h.Execute(t.Context(), items[1])
	require.NoError(t, err)
	require.Equal(t, plugin.OutcomeDone, res.Outcome)
	require.NoFileExists(t, filepath.Join(dir, "snap-locked"))
}

func TestSnapshotFilesWithoutDirFails(t *testing.T) {
	got := plugintest.Run(t, newAction(env(nil)), snapshotItem(t, "s", "snap"))
	require.Equal(t, plugin.OutcomeFailed, got[0].Result.Outcome)
	require.Contains(t, got[0].Result.Message, "LETHE_SNAPSHOT_DIR")
}

func TestSnapshotFilesConfiguredResourceAndField(t *testing.T) {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "disk-1"))
	a := newAction(env(map[string]string{
		"LETHE_SNAPSHOT_DIR":      dir,
		"LETHE_SNAPSHOT_RESOURCE": "disks.example.com",
		"LETHE_SNAPSHOT_FIELD":    "spec.file",
	}))
	disk := plugintest.ItemFromJSON(t, "disks", `{"apiVersion":"example.com/v1","kind":"Disk","metadata":{"name":"d","namespace":"ns"},"spec":{"file":"disk-1"}}`)
	got := plugintest.Run(t, a, disk, snapshotItem(t, "s", "disk-1"))
	require.Equal(t, plugin.OutcomeDone, got[0].Result.Outcome, got[0].Result.Message)
	require.False(t, got[1].Selected)
	require.NoFileExists(t, filepath.Join(dir, "disk-1"))
}

func TestSnapshotFilesCancelled(t *testing.T) {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "snap"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	h := &plugintest.Harness{Action: newAction(env(map[string]string{"LETHE_SNAPSHOT_DIR": dir}))}
	res, err := h.Execute(ctx, snapshotItem(t, "s", "snap"))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, plugin.OutcomeFailed, res.Outcome)
	require.FileExists(t, filepath.Join(dir, "snap"), "a cancelled item deletes nothing")
}

// TestSnapshotFilesOverGRPC runs many items through the SDK's real server,
// in memory, with small batches.
func TestSnapshotFilesOverGRPC(t *testing.T) {
	dir := t.TempDir()
	var items []plugin.Item
	for i := range 50 {
		name := fmt.Sprintf("snap-%d", i)
		touch(t, filepath.Join(dir, name))
		items = append(items, snapshotItem(t, name, name))
	}
	c := plugintest.Serve(t, &plugin.Plugin{
		Name: "snapshot-files", Version: Version, MaxConcurrency: 4,
		Action: newAction(env(map[string]string{"LETHE_SNAPSHOT_DIR": dir})),
	})
	c.BatchSize = 8
	for _, r := range c.Run(t, "lethe.io/snapshot-files", items...) {
		require.Equal(t, plugin.OutcomeDone, r.Result.Outcome, r.Result.Message)
	}
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left)
}

// TestSnapshotFilesLeavesAnotherBackupsSnapshot: an item labelled with
// another backup's name is skipped, and its snapshot stays.
func TestSnapshotFilesLeavesAnotherBackupsSnapshot(t *testing.T) {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "theirs"))
	touch(t, filepath.Join(dir, "ours"))
	labelled := func(name, handle, backup string) plugin.Item {
		return plugintest.ItemFromObject(t, "volumesnapshotcontents", map[string]any{
			"apiVersion": "snapshot.storage.k8s.io/v1",
			"kind":       "VolumeSnapshotContent",
			"metadata":   map[string]any{"name": name, "labels": map[string]any{OwnerLabelDefault: backup}},
			"status":     map[string]any{"snapshotHandle": handle},
		})
	}
	h := &plugintest.Harness{
		Action: newAction(env(map[string]string{"LETHE_SNAPSHOT_DIR": dir})),
		Backup: plugin.Backup{Name: "nightly-1"},
	}
	got := h.Run(t, labelled("a", "theirs", "nightly-0"), labelled("b", "ours", "nightly-1"))
	require.Equal(t, plugin.OutcomeSkipped, got[0].Result.Outcome, got[0].Result.Message)
	require.Contains(t, got[0].Result.Message, `belongs to backup "nightly-0"`)
	require.FileExists(t, filepath.Join(dir, "theirs"), "another backup's snapshot stays")
	require.Equal(t, plugin.OutcomeDone, got[1].Result.Outcome, got[1].Result.Message)
	require.NoFileExists(t, filepath.Join(dir, "ours"))
}
