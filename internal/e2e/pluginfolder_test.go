package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// state is what a refused command must leave unchanged: the catalog, the
// storage, the audit log, the plugin folder, and the recorder's file (no
// plugin item ran).
type state struct {
	list, audit     string
	storage, plugin map[string]string
	record          int64
}

func (e *env) state() state {
	e.t.Helper()
	return state{
		list:    e.ok("backup", "list", "-o", "json").stdout,
		audit:   e.ok("audit", "-o", "json").stdout,
		storage: treeDigest(e.t, e.storageDir()),
		plugin:  treeDigest(e.t, e.pluginDir()),
		record:  fileSize(e.record),
	}
}

// runWithin runs lethe and fails the test if it is still running after
// d: for `lethe server`, which must refuse at once rather than serve.
func (e *env) runWithin(d time.Duration, args ...string) result {
	e.t.Helper()
	p := e.start(args...)
	select {
	case <-p.done:
	case <-time.After(d):
		e.t.Fatalf("lethe %v still running after %s: it did not refuse", args, d)
	}
	return p.wait(e.t)
}

// TestBrokenPluginFolderRefusesEverywhere: every command that runs
// plugins (plugin list, backup create, backup delete, lethe server) fails
// with one line naming the problem and a non-zero exit, and changes
// nothing, when the plugin folder given does not exist (a typo), when a
// file in it is not executable, and when a binary the lock file pins is
// absent. A folder named by --plugin-dir or LETHE_PLUGIN_DIR is never
// created.
func TestBrokenPluginFolderRefusesEverywhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// breakIt breaks the installation and returns the flags to pass
		// and the one-line error every command must print.
		breakIt func(e *env) (flags []string, want string)
		// after checks what breakIt must have left as it was.
		after func(e *env)
	}{
		{"--plugin-dir names a folder that does not exist", func(e *env) ([]string, string) {
			typo := filepath.Join(e.home, "plugns")
			return []string{"--plugin-dir", typo}, "plugin directory " + typo + " does not exist"
		}, func(e *env) { require.NoDirExists(e.t, filepath.Join(e.home, "plugns"), "--plugin-dir was created") }},
		{"LETHE_PLUGIN_DIR names a folder that does not exist", func(e *env) ([]string, string) {
			typo := filepath.Join(e.home, "plugns")
			e.extra = append(e.extra, "LETHE_PLUGIN_DIR="+typo)
			return nil, "plugin directory " + typo + " does not exist"
		}, func(e *env) {
			require.NoDirExists(e.t, filepath.Join(e.home, "plugns"), "LETHE_PLUGIN_DIR was created")
		}},
		{"a file in the plugin folder is not executable", func(e *env) ([]string, string) {
			p := filepath.Join(e.pluginDir(), "notes.txt")
			require.NoError(e.t, os.WriteFile(p, []byte("not a plugin\n"), 0o640))
			return nil, p + " in the plugin directory is not executable"
		}, nil},
		{"a binary pinned in the lock file is absent", func(e *env) ([]string, string) {
			e.ok("plugin", "lock")
			e.uninstall(pluginNoop)
			return nil, "plugin binary noop is pinned in the lock file " + filepath.Join(e.pluginDir(), "lethe-plugins.lock") + " but absent from " + e.pluginDir()
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, pluginRecorder, pluginNoop)
			e.create("kept", 6)
			e.create("queued", 3)
			e.ok("backup", "delete", "queued", "--yes", "--async")
			tarball := e.writeTarball("fresh", 4)
			flags, want := tc.breakIt(e)
			before := e.state()

			for _, args := range [][]string{
				{"plugin", "list"},
				{"backup", "create", "fresh", "--from", tarball},
				{"backup", "delete", "kept", "--yes"},
				{"backup", "delete", "kept", "--yes", "--no-plugins"},
				{"server", "--metrics-addr", freePort(t)},
			} {
				var r result
				if args[0] == "server" {
					r = e.runWithin(60*time.Second, append(args, flags...)...)
				} else {
					r = e.run(append(args, flags...)...)
				}
				require.Equal(t, 1, r.code, "%s", r)
				requireOneErrorLine(t, r, want)
				require.Equal(t, before, e.state(), "%s changed something", r.args)
			}
			require.Equal(t, "Active", e.get("kept").Phase)
			require.FileExists(t, e.tarballPath("kept"))
			require.FileExists(t, e.tarballPath("queued"))
			require.Zero(t, fileSize(e.record), "a plugin ran")
			if tc.after != nil {
				tc.after(e)
			}
		})
	}
}

// TestDefaultPluginFolderIsCreated: the default plugin folder,
// <home>/plugins, is created when it is missing (and, empty, means no
// plugins); a folder given by --plugin-dir or LETHE_PLUGIN_DIR is not.
func TestDefaultPluginFolderIsCreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.NoError(t, os.Remove(e.pluginDir()))
	r := e.ok("plugin", "list")
	require.DirExists(t, e.pluginDir())
	require.NotContains(t, r.stdout, "lethe.io/")

	given := filepath.Join(e.home, "elsewhere")
	r = e.run("plugin", "list", "--plugin-dir", given)
	require.Equal(t, 1, r.code, "%s", r)
	requireOneErrorLine(t, r, "plugin directory "+given+" does not exist")
	require.NoDirExists(t, given)
}

// TestServerWithAnEmptyPluginFolder: `lethe server` refuses an empty
// plugin folder, changing nothing, and runs with --no-plugins. (The same
// rule for `backup delete` is TestNoPluginsMustBeSaid.)
func TestServerWithAnEmptyPluginFolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.ok("backup", "create", "bare", "--from", e.writeTarball("bare", 4))
	e.ok("backup", "delete", "bare", "--yes", "--async", "--no-plugins")
	before := e.state()

	r := e.runWithin(60*time.Second, "server", "--metrics-addr", freePort(t))
	require.Equal(t, exitPlugins, r.code, "%s", r)
	requireOneErrorLine(t, r, "plugin folder "+e.pluginDir()+" is empty")
	require.Equal(t, before, e.state(), "the refused server changed something")
	require.FileExists(t, e.tarballPath("bare"))

	// With --no-plugins it serves, and the queued deletion goes through.
	p := e.start("server", "--no-plugins", "--metrics-addr", freePort(t))
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && e.run("backup", "get", "bare").code != 4 {
		if p.exited() {
			t.Fatalf("server exited: %s", p.wait(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r = p.wait(t)
	require.Equal(t, 0, r.code, "%s", r)
	e.requirePurged("bare")
}
