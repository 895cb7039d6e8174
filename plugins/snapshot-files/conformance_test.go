package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
	"github.com/lethehq/lethe/pkg/plugin/plugintest"
)

// TestConformance builds the plugin binary and checks it as the host would
// run it, configured through its environment.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binary")
	}
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "snap-1"))
	touch(t, filepath.Join(dir, "snap-2"))
	touch(t, filepath.Join(dir, "snap-2.lock"))
	want := map[string]plugin.Outcome{"one": plugin.OutcomeDone, "locked": plugin.OutcomeBlocked}
	plugintest.Conformance(t, plugintest.Build(t, "."), &plugintest.ConformanceOptions{
		Env:     []string{"LETHE_SNAPSHOT_DIR=" + dir},
		Plugins: []string{"lethe.io/snapshot-files"},
		Items:   []plugin.Item{snapshotItem(t, "one", "snap-1"), snapshotItem(t, "locked", "snap-2")},
		CheckResult: func(t testing.TB, _ string, it plugin.Item, r plugin.Result) {
			require.Equal(t, want[it.Name], r.Outcome, "%s: %s", it.Name, r.Message)
		},
	})
	_, err := os.Stat(filepath.Join(dir, "snap-1"))
	require.ErrorIs(t, err, os.ErrNotExist, "the binary deleted the snapshot")
	require.FileExists(t, filepath.Join(dir, "snap-2"))
}
