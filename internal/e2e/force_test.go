package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// TestAbandonOnAStuckDeletion is issue 8 point 2: --force only skips the
// grace window, on a stuck deletion too (it retries and stays, exit 3);
// purging past a failed item needs --abandon, which without a terminal
// also needs --yes; it retries once, purges, says so, and the audit has a
// force-purge naming the abandoned item and its plugin.
func TestAbandonOnAStuckDeletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	e.create("stuck", 12)
	bad := archivetest.SpecN(5, 200)
	require.NoError(t, os.WriteFile(filepath.Join(e.control, bad.Name+".fail"), nil, 0o600))

	r := e.run("backup", "delete", "stuck", "--yes", "--force")
	require.Equal(t, 3, r.code, "--force on an Active backup only skips the grace window\n%s", r)
	require.Equal(t, "Deleting", e.get("stuck").Phase)

	// --force (with --yes) on the stuck deletion: retried, still stuck.
	r = e.run("backup", "delete", "stuck", "--yes", "--force")
	require.Equal(t, 3, r.code, "--force never purges past a failed item\n%s", r)
	require.Equal(t, "Deleting", e.get("stuck").Phase)

	r = e.run("backup", "delete", "stuck", "--abandon")
	require.Equal(t, 2, r.code, "no terminal, no --yes: refused\n%s", r)
	requireOneErrorLine(t, r, "--abandon without a terminal needs --yes")
	require.Equal(t, "Deleting", e.get("stuck").Phase)

	r = e.run("backup", "delete", "stuck", "--abandon", "--dry-run")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "ABANDON:   1 item is failed or blocked")
	require.NotContains(t, r.stdout, "REJECTED")
	require.Equal(t, "Deleting", e.get("stuck").Phase)

	r = e.ok("backup", "delete", "stuck", "--yes", "--abandon")
	require.Contains(t, r.stdout, "deleted, ABANDONING: 1 item was still failed or blocked")
	require.Contains(t, r.stdout, bad.Key())
	e.requirePurged("stuck")

	r = e.ok("audit", "--name", "stuck", "-o", "json")
	require.Contains(t, r.stdout, `"action": "force-purge"`)
	require.Contains(t, r.stdout, bad.Name)
	require.Contains(t, r.stdout, `"abandonedPlugins"`)
	require.Contains(t, r.stdout, recFirst)
}
