package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// TestForceOnAStuckDeletion: an item that never succeeds keeps the backup;
// 'delete --force' without a terminal and without --yes is refused; with
// --yes it retries once, purges anyway, says so, and the audit log has a
// force-purge naming the abandoned item.
func TestForceOnAStuckDeletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	e.create("stuck", 12)
	bad := archivetest.SpecN(5, 200)
	require.NoError(t, os.WriteFile(filepath.Join(e.control, bad.Name+".fail"), nil, 0o600))

	r := e.run("backup", "delete", "stuck", "--yes", "--force")
	require.Equal(t, 3, r.code, "--force on an Active backup only skips the grace window\n%s", r)

	r = e.run("backup", "delete", "stuck", "--force")
	require.Equal(t, 2, r.code, "no terminal, no --yes: refused\n%s", r)
	require.Equal(t, "Deleting", e.get("stuck").Phase)

	r = e.run("backup", "delete", "stuck", "--force", "--dry-run")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "--force: 1 items are failed or blocked")
	require.Equal(t, "Deleting", e.get("stuck").Phase)

	r = e.ok("backup", "delete", "stuck", "--yes", "--force")
	require.Contains(t, r.stdout, "deleted BY FORCE: 1 items were still failed or blocked")
	require.Contains(t, r.stdout, bad.Key())
	e.requirePurged("stuck")

	r = e.ok("audit", "--name", "stuck", "-o", "json")
	require.Contains(t, r.stdout, `"action": "force-purge"`)
	require.Contains(t, r.stdout, bad.Name)
}
