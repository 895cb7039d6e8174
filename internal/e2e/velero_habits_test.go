package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBackupGetListsWithNoNameAndShowsEachOfSeveral is issue 24 point 8,
// as `velero backup get`: no name lists every backup, several names show
// each in the order given, and a name not in the catalog is reported
// after the others are shown (exit 4).
func TestBackupGetListsWithNoNameAndShowsEachOfSeveral(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginNoop)
	e.create("one", 2)
	e.create("two", 3)
	r := e.ok("backup", "get")
	require.Regexp(t, `(?s)NAME.*one\s+Active.*two\s+Active`, r.stdout)
	require.Len(t, listItems(t, e.ok("backup", "get", "-o", "json").stdout, "Backup"), 2)

	r = e.ok("backup", "get", "two", "one")
	require.Regexp(t, `(?s)Name:\s+two.*Name:\s+one`, r.stdout)
	some := listItems(t, e.ok("backup", "get", "two", "one", "-o", "json").stdout, "Backup")
	require.Len(t, some, 2)
	for i, want := range []string{"two", "one"} {
		var b backupJSON
		require.NoError(t, json.Unmarshal(some[i], &b))
		require.Equal(t, want, b.Name)
	}

	r = e.run("backup", "get", "one", "nope", "two")
	require.Equal(t, 4, r.code, "%s", r)
	require.Regexp(t, `(?s)Name:\s+one.*Name:\s+two`, r.stdout)
	require.Equal(t, "Error: backup \"nope\" not found\n", r.stderr, "%s", r)
}

// TestPluginLockOnAFreshHomeWithOnlyVeleroPlugins: a Velero user's first
// step, a home with velero-plugins/ and nothing else, pins the Velero
// plugins and exits 0.
func TestPluginLockOnAFreshHomeWithOnlyVeleroPlugins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.NoError(t, os.RemoveAll(e.pluginDir()))
	velero := filepath.Join(e.home, "velero-plugins")
	require.NoError(t, os.MkdirAll(velero, 0o750))
	copyFile(t, filepath.Join(bin, pluginNoop), filepath.Join(velero, "velero-plugin-example"), 0o750)
	r := e.ok("plugin", "lock")
	require.Contains(t, r.stdout, "velero-plugin-example")
	require.Contains(t, r.stdout, "1 Velero plugin binary pinned")
	require.FileExists(t, filepath.Join(velero, "lethe-plugins.lock"))
	r = e.ok("plugin", "lock")
	require.Contains(t, r.stdout, "unchanged")
}

// TestPluginLockShowsTheVeleroPluginsBesideLethesFolder: with both plugin
// folders (`plugin list` on a fresh home makes the Lethe one), `plugin
// lock` shows the Velero plugins it pins in its table, and pins them with
// -o json too.
func TestPluginLockShowsTheVeleroPluginsBesideLethesFolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	velero := filepath.Join(e.home, "velero-plugins")
	require.NoError(t, os.MkdirAll(velero, 0o750))
	copyFile(t, filepath.Join(bin, pluginNoop), filepath.Join(velero, "velero-plugin-example"), 0o750)
	r := e.ok("plugin", "lock", "-o", "json")
	require.Contains(t, r.stdout, `"binary": "velero-plugin-example"`)
	require.FileExists(t, filepath.Join(velero, "lethe-plugins.lock"))
	require.NoError(t, os.Remove(filepath.Join(velero, "lethe-plugins.lock")))
	r = e.ok("plugin", "lock")
	require.Regexp(t, `velero-plugin-example\s+[0-9a-f]{64}\s+new`, r.stdout)
	require.Contains(t, r.stdout, "1 Velero plugin binary pinned")
	r = e.ok("plugin", "lock")
	require.Regexp(t, `velero-plugin-example\s+[0-9a-f]{64}\s+unchanged`, r.stdout)
}
