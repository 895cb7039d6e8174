package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// complete runs lethe's hidden __complete command, as the shell scripts
// of lethe completion do at each Tab, and returns the candidates.
func (e *env) complete(args ...string) []string {
	e.t.Helper()
	r := e.ok(append([]string{"__complete"}, args...)...)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.True(e.t, strings.HasPrefix(lines[len(lines)-1], ":"), "the last line is the directive: %s", r)
	out := []string{}
	for _, l := range lines[:len(lines)-1] {
		out = append(out, strings.SplitN(l, "\t", 2)[0])
	}
	return out
}

// TestCompletionThroughTheBinary is issue 26 point 9: lethe completion is
// listed in help and writes a script; at each Tab the binary completes
// kinds, resource names of the kind typed (in the namespace given),
// namespaces, backup names (each once), storage locations and plugin
// names from the catalog, and a completion never creates a catalog.
func TestCompletionThroughTheBinary(t *testing.T) {
	e := newEnv(t, pluginRecorder)
	require.Contains(t, e.ok("--help").stdout, "completion")
	require.Contains(t, e.ok("completion", "bash").stdout, "__start_lethe")

	require.Equal(t, []string{"backups", "backupstoragelocations", "bundles"}, e.complete("get", ""), "no catalog yet: Lethe's own kinds")
	require.NoFileExists(t, filepath.Join(e.home, "lethe.db"), "a completion created the catalog")

	e.create("b1", 3)
	e.create("b2", 3)
	e.ok("apply", "-f", e.writeFile("dbs.yaml", "kind: Database\nmetadata: {name: orders, namespace: shop}\n---\n"+
		"kind: Database\nmetadata: {name: users, namespace: shop}\n---\nkind: Database\nmetadata: {name: logs, namespace: ops}\n---\n"+
		"kind: Policy\nmetadata: {name: keep}\n"))

	require.Equal(t, []string{"backups", "backupstoragelocations", "bundles", "databases", "policies"}, e.complete("get", ""))
	require.Equal(t, []string{"databases"}, e.complete("describe", "Da"))
	require.Equal(t, []string{"logs", "orders", "users"}, e.complete("get", "databases", ""))
	require.Equal(t, []string{"orders", "users"}, e.complete("get", "databases", "-n", "shop", ""))
	require.Equal(t, []string{"orders"}, e.complete("delete", "Database", "or"))
	require.Equal(t, []string{"ops", "shop"}, e.complete("get", "databases", "-n", ""))
	require.Equal(t, []string{"keep"}, e.complete("explain", "policy", ""))
	require.Empty(t, e.complete("get", "databases", "orders", ""), "nothing after NAME")
	require.Equal(t, []string{"b1", "b2"}, e.complete("get", "bk", ""))
	require.Equal(t, []string{"b1", "b2"}, e.complete("backup", "delete", ""))
	require.Equal(t, []string{"b2"}, e.complete("backup", "delete", "b1", ""), "each backup once")
	require.Equal(t, []string{"default"}, e.complete("location", "get", ""))
	require.Equal(t, []string{"policies"}, e.complete("audit", "--kind", "p"))
	require.Equal(t, []string{recFirst + "=", recSecond + "=", recPods + "="}, e.complete("--plugin-timeout", "test.lethe.io/"))

	_, err := os.Stat(filepath.Join(e.home, "lethe.db"))
	require.NoError(t, err)
}
