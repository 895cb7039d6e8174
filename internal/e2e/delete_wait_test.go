package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// uidOf reads a resource's UID through the binary.
func uidOf(t *testing.T, e *env, kind, name, ns string) string {
	t.Helper()
	r, code := e.getResource(kind, ns, name)
	require.Equal(t, 0, code)
	require.NotEmpty(t, r.UID)
	return r.UID
}

// TestDeleteWaitEndsWhenAResourceItNamesIsRecreated: `delete -f --wait`
// on a file naming Volumes a and b (b first: last document first). While
// the waiting process is held in b's plugin (the gate), a server purges a
// and a new a is applied; then the gate opens. The waiting process, which
// never saw the key empty, must not wait for the new a (an Active
// resource it did not delete): it ends with exit 0, reports a's deletion
// done and the new one left alone, and the new a stays Active.
func TestDeleteWaitEndsWhenAResourceItNamesIsRecreated(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, _ func(string, ...any)) {
		copyFile(t, filepath.Join(bin, pluginGate), filepath.Join(e.pluginDir(), pluginGate), 0o750)
		e.ok("plugin", "lock")
		va := "kind: Volume\nmetadata: {name: a, namespace: shop}\n"
		shop := e.writeFile("shop.yaml", va+"---\nkind: Volume\nmetadata: {name: b, namespace: shop}\n")
		e.ok("apply", "-f", shop)
		oldA := uidOf(t, e, "Volume", "a", "shop")

		hold := filepath.Join(e.gate, "hold")
		require.NoError(t, os.WriteFile(hold, nil, 0o600))
		waiting := e.start("delete", "-f", shop, "--yes", "--wait")
		require.Eventually(t, func() bool {
			_, err := os.Stat(filepath.Join(e.gate, "started"))
			return err == nil || waiting.exited()
		}, cmdTimeout, 10*time.Millisecond, "the waiting process reaches b's plugin")
		if waiting.exited() {
			t.Fatalf("%s", waiting.wait(t))
		}

		// A server whose gate is open purges a (b's item is leased by the
		// waiting process, which is alive: the server leaves it).
		gate := e.gate
		e.gate = t.TempDir()
		srv := e.start("server", "--metrics-addr", freePort(t))
		e.gate = gate
		require.Eventually(t, func() bool {
			return e.run("get", "Volume", "a", "-n", "shop").code == 4 || srv.exited()
		}, cmdTimeout, 20*time.Millisecond, "the server purges a")
		if srv.exited() {
			t.Fatalf("%s\nwaiting: %s", srv.wait(t), e.run("get", "Volume", "-n", "shop"))
		}
		require.NoError(t, srv.cmd.Process.Signal(os.Interrupt))
		srv.wait(t)

		e.ok("apply", "-f", e.writeFile("a.yaml", va))
		newA := uidOf(t, e, "Volume", "a", "shop")
		require.NotEqual(t, oldA, newA)

		require.NoError(t, os.Remove(hold))
		select {
		case <-waiting.done:
		case <-time.After(30 * time.Second):
			t.Fatal("delete --wait still waits 30s after its work was done: it waits for the new a")
		}
		r := waiting.wait(t)
		require.Equal(t, 0, r.code, "%s", r)
		require.Contains(t, r.stdout, "Volume/shop/b: purged\n", "%s", r)
		require.Contains(t, r.stdout, "Volume/shop/a: purged; a new resource of the same name (UID "+newA+") was created meanwhile; it is left alone\n", "%s", r)
		require.Equal(t, newA, uidOf(t, e, "Volume", "a", "shop"), "the new a is not deleted")
		now, _ := e.getResource("Volume", "shop", "a")
		require.Equal(t, "Active", now.Phase)
	})
}

// TestConcurrentIdenticalDeletesBothSucceed: two `delete -f --yes --wait`
// of one file at once both exit 0 (a request for a resource already
// Deleting joins its deletion), whichever gets there first, and both
// resources are purged. Several rounds, to meet several interleavings.
func TestConcurrentIdenticalDeletesBothSucceed(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, _ func(string, ...any)) {
		shop := e.writeFile("shop.yaml", "kind: Volume\nmetadata: {name: data, namespace: shop}\n---\n"+
			"kind: Snapshot\nmetadata: {name: s1, namespace: shop}\nreferences: [{kind: Volume, namespace: shop, name: data, onTargetDelete: cascade}]\n---\n"+
			"kind: Volume\nmetadata: {name: logs, namespace: shop}\n")
		for range 4 {
			e.ok("apply", "-f", shop)
			p1 := e.start("delete", "-f", shop, "--yes", "--wait")
			p2 := e.start("delete", "-f", shop, "--yes", "--wait")
			for _, p := range []*proc{p1, p2} {
				r := p.wait(t)
				require.Equal(t, 0, r.code, "%s", r)
				require.NotContains(t, r.stderr, "cannot go from", "%s", r)
			}
			for _, n := range []string{"data", "logs"} {
				require.Equal(t, 4, e.run("get", "Volume", n, "-n", "shop").code)
			}
		}
	})
}

// TestDeleteIgnoreNotFound: --ignore-not-found makes a missing or purged
// resource exit 0, for KIND NAME and -f; without it, exit 4.
func TestDeleteIgnoreNotFound(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("real.yaml", "kind: Volume\nmetadata: {name: real, namespace: shop}\n"))
	r := e.run("delete", "Volume", "ghost", "-n", "shop", "--yes")
	require.Equal(t, 4, r.code, "%s", r)
	r = e.ok("delete", "Volume", "ghost", "-n", "shop", "--yes", "--ignore-not-found")
	require.Contains(t, r.stdout, "Volume/shop/ghost: not found", "%s", r)
	ghost := e.writeFile("ghost.yaml", "kind: Volume\nmetadata: {name: ghost, namespace: shop}\n---\nkind: Volume\nmetadata: {name: real, namespace: shop}\n")
	r = e.run("delete", "-f", ghost, "--yes", "--wait")
	require.Equal(t, 4, r.code, "%s", r)
	r = e.ok("delete", "-f", ghost, "--yes", "--wait", "--ignore-not-found")
	require.Contains(t, r.stdout, "Volume/shop/ghost: not found", "%s", r)
	require.Contains(t, r.stdout, "Volume/shop/real: purged", "%s", r)
	r = e.ok("delete", "backup", "gone", "--yes", "--ignore-not-found")
	require.True(t, strings.Contains(r.stdout, "not found"), "%s", r)
}
