package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// addMarker installs an executable in dir that, if it ever runs, creates
// the returned file.
func addMarker(t *testing.T, dir, name string) string {
	t.Helper()
	mark := filepath.Join(t.TempDir(), name+"-ran")
	require.NoError(t, os.MkdirAll(dir, 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o750))
	return mark
}

// TestDeletingTheVeleroLockLetsNoUnpinnedBinaryRun is the security
// review's exploit: with Lethe's lock kept elsewhere (--plugin-lock),
// whoever could write the Velero plugin folder deleted its lock file and
// dropped in a binary, which ran. Pinning is now all or nothing: the
// command fails in one line and the binary never runs. The Velero lock can
// be kept elsewhere too (--velero-plugin-lock).
func TestDeletingTheVeleroLockLetsNoUnpinnedBinaryRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginNoop)
	locks := t.TempDir()
	lock := filepath.Join(locks, "lethe.lock")
	vdir := filepath.Join(e.home, "velero-plugins")
	require.NoError(t, os.MkdirAll(vdir, 0o750))
	r := e.ok("plugin", "lock", "--plugin-lock", lock)
	vlock := filepath.Join(vdir, "lethe-plugins.lock")
	require.Contains(t, r.stdout, "wrote "+vlock+": 0 Velero plugin binaries pinned")

	require.NoError(t, os.Remove(vlock))
	mark := addMarker(t, vdir, "evil")
	r = e.run("plugin", "list", "--plugin-lock", lock)
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stderr, "plugin lock file "+vlock+" ")
	require.Contains(t, r.stderr, " does not exist")
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	require.NoFileExists(t, mark, "the unpinned binary ran")

	// The Velero lock kept elsewhere: written there. A lock file path
	// that is configured must exist wherever plugins run: deleting it
	// (here with no other lock present) runs nothing unpinned either.
	e = newEnv(t)
	vdir = filepath.Join(e.home, "velero-plugins")
	require.NoError(t, os.MkdirAll(vdir, 0o750))
	velero := filepath.Join(locks, "velero.lock")
	r = e.ok("plugin", "lock", "--velero-plugin-lock", velero)
	require.Contains(t, r.stdout, "wrote "+velero+": 0 Velero plugin binaries pinned")
	require.NoFileExists(t, filepath.Join(vdir, "lethe-plugins.lock"))
	e.ok("plugin", "list", "--velero-plugin-lock", velero)
	require.NoError(t, os.Remove(velero))
	require.NoError(t, os.Remove(filepath.Join(e.pluginDir(), "lethe-plugins.lock")))
	mark = addMarker(t, vdir, "evil")
	r = e.run("plugin", "list", "--velero-plugin-lock", velero)
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stderr, "plugin lock file "+velero+" does not exist, and a lock is required")
	require.NoFileExists(t, mark, "the unpinned binary ran")
}

// TestServerRunsOnlyPinnedPlugins: `lethe server` requires a lock file by
// default: with plugin binaries and no lock, it fails in one line before
// any of them runs; `lethe plugin lock` makes it start. With
// --require-plugin-lock=false it runs them unpinned, and warns.
func TestServerRunsOnlyPinnedPlugins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginNoop)
	mark := addMarker(t, e.pluginDir(), "unpinned")
	r := e.run("server", "--metrics-addr", freePort(t))
	require.NotEqual(t, 0, r.code, "%s", r)
	require.Contains(t, r.stderr, "plugin lock file "+filepath.Join(e.pluginDir(), "lethe-plugins.lock")+" does not exist, and a lock is required")
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	require.NoFileExists(t, mark, "a plugin ran unpinned")
	require.NoError(t, os.Remove(filepath.Join(e.pluginDir(), "unpinned")))

	start := func(args ...string) result {
		t.Helper()
		addr := freeAddr(t)
		rep := &replica{name: "server", addr: addr}
		rep.p = e.start(append([]string{"server", "--metrics-addr", addr}, args...)...)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		waitReady(ctx, t, rep)
		require.NoError(t, rep.p.cmd.Process.Signal(syscall.SIGTERM))
		return rep.p.wait(t)
	}
	r = start("--require-plugin-lock=false")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stderr, "--require-plugin-lock=false: plugins that no lock file pins will run")

	e.ok("plugin", "lock")
	r = start()
	require.Equal(t, 0, r.code, "%s", r)
	require.NotContains(t, r.stderr, "require-plugin-lock")
}
