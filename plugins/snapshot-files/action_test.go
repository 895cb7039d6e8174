package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

func TestExecute(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"LETHE_SNAPSHOT_DIR": dir}
	a := newAction(func(k string) string { return env[k] })
	sel, err := a.AppliesTo(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{ResourceDefault}, sel.IncludedResources)

	exec := func(handle string) plugin.Result {
		obj := `{"status":{"snapshotHandle":"` + handle + `"}}`
		if handle == "" {
			obj = `{"status":{}}`
		}
		return plugin.Classify(a.Execute(context.Background(), &plugin.DeleteItemActionInput{Item: plugin.Item{Object: []byte(obj)}}))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "snap-1"), nil, 0o644))
	require.Equal(t, plugin.OutcomeDone, exec("snap-1").Outcome)
	require.NoFileExists(t, filepath.Join(dir, "snap-1"))
	require.Equal(t, plugin.OutcomeDone, exec("snap-1").Outcome, "a missing file is done")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "snap-2"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "snap-2.lock"), nil, 0o644))
	r := exec("snap-2")
	require.Equal(t, plugin.OutcomeBlocked, r.Outcome)
	require.Equal(t, RetryAfter, r.RetryAfter)
	require.FileExists(t, filepath.Join(dir, "snap-2"))

	require.Equal(t, plugin.OutcomeSkipped, exec("").Outcome)
	for _, bad := range []string{"../escape", "/etc/passwd", "a/../../b", "sub/file"} {
		r := exec(bad)
		require.Equal(t, plugin.OutcomeFailed, r.Outcome, bad)
		require.Contains(t, r.Message, "refusing")
	}

	unset := newAction(func(string) string { return "" })
	require.Contains(t, plugin.Classify(unset.Execute(context.Background(), &plugin.DeleteItemActionInput{})).Message, "LETHE_SNAPSHOT_DIR")
}
