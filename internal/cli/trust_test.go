package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPluginEnvFlagParsing(t *testing.T) {
	f := &trustFlags{}
	env := map[string]string{"LETHE_PLUGIN_ENV": "snapshot-files:LETHE_SNAPSHOT_DIR=/srv/snaps\n# a comment\n\n ebs:AWS_REGION=eu-west-1 \nebs:TAGS=a=1,b=2\n"}
	require.NoError(t, f.resolve(func(k string) string { return env[k] }))
	require.Equal(t, map[string]map[string]string{
		"snapshot-files": {"LETHE_SNAPSHOT_DIR": "/srv/snaps"},
		"ebs":            {"AWS_REGION": "eu-west-1", "TAGS": "a=1,b=2"},
	}, f.pluginEnvM)

	// Flags win over the environment variable, entirely.
	f = &trustFlags{pluginEnv: []string{"noop:A=1"}}
	require.NoError(t, f.resolve(func(k string) string { return env[k] }))
	require.Equal(t, map[string]map[string]string{"noop": {"A": "1"}}, f.pluginEnvM)

	for in, want := range map[string]string{
		"noop":                          "use NAME:KEY=VALUE",
		"noop:A":                        "use NAME:KEY=VALUE",
		":A=1":                          "use NAME:KEY=VALUE",
		"noop:PLUGIN_UNIX_SOCKET_DIR=x": "PLUGIN_UNIX_SOCKET_DIR is set by Lethe itself",
		"noop:LETHE_PLUGIN_MTLS_FD=3":   "LETHE_PLUGIN_MTLS_FD is set by Lethe itself",
	} {
		f := &trustFlags{pluginEnv: []string{in}}
		err := f.resolve(func(string) string { return "" })
		require.ErrorContains(t, err, want, in)
	}
	f = &trustFlags{pluginEnv: []string{"noop:A=1", "noop:A=2"}}
	require.ErrorContains(t, f.resolve(func(string) string { return "" }), "A is configured twice for noop")
}

func TestPluginTrustFlags(t *testing.T) {
	home, _ := newHome(t)
	lock := filepath.Join(t.TempDir(), "plugins.lock")

	// No lock file, and one is required for the binary there: refused
	// before it runs.
	require.NoError(t, os.MkdirAll(filepath.Join(home, "plugins"), 0o700))
	ran := filepath.Join(t.TempDir(), "ran")
	x := filepath.Join(home, "plugins", "x")
	require.NoError(t, os.WriteFile(x, []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o700))
	code, _, stderr := run(t, home, false, "", "plugin", "list", "--require-plugin-lock", "--plugin-lock", lock)
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "plugin lock file "+lock+" does not exist, and a lock is required")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, stderr)
	require.NoFileExists(t, ran)
	require.NoError(t, os.Remove(x))

	// plugin lock writes where --plugin-lock says.
	code, out, stderr := run(t, home, false, "", "plugin", "lock", "--plugin-lock", lock)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "wrote "+lock)
	require.FileExists(t, lock)
	require.NoFileExists(t, filepath.Join(home, "plugins", "lethe-plugins.lock"))
	code, _, stderr = run(t, home, false, "", "plugin", "list", "--require-plugin-lock", "--plugin-lock", lock)
	require.Equal(t, 0, code, stderr)

	// --plugin-env must name an installed binary.
	code, _, stderr = run(t, home, false, "", "plugin", "list", "--plugin-env", "nope:A=1")
	require.Equal(t, exitUsage, code, "bad plugin configuration is bad usage, like --plugin-timeout\n%s", stderr)
	first, _, _ := strings.Cut(stderr, "\n")
	require.Contains(t, first, `plugin environment for "nope": no plugin binary of that name in `+filepath.Join(home, "plugins"))
	code, _, stderr = run(t, home, false, "", "plugin", "list", "--plugin-env", "bad")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "use NAME:KEY=VALUE")

	// A lock file others can write is refused.
	require.NoError(t, os.Chmod(lock, 0o666))
	code, _, stderr = run(t, home, false, "", "plugin", "list", "--plugin-lock", lock)
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, lock+" is world-writable")
}
