package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// cascadeWithWindows: App o owns Volume d1 (a grace window of its own)
// and Volume d2, which owns Disk e (held by a user finalizer); Report x
// holds a cascade reference to o and has a grace window of its own.
const cascadeWithWindows = `kind: App
metadata: {name: o, namespace: prod}
---
kind: Volume
metadata:
  name: d1
  namespace: prod
  annotations: {lethe.io/deletion-delay: 1h}
  ownerReferences: [{kind: App, name: o, blockOwnerDeletion: true}]
---
kind: Volume
metadata:
  name: d2
  namespace: prod
  ownerReferences: [{kind: App, name: o, blockOwnerDeletion: true}]
---
kind: Disk
metadata:
  name: e
  namespace: prod
  finalizers: [example.com/keep]
  ownerReferences: [{kind: Volume, name: d2, blockOwnerDeletion: true}]
---
kind: Report
metadata:
  name: x
  namespace: prod
  annotations: {lethe.io/deletion-delay: 2h}
references:
- {kind: App, namespace: prod, name: o, onTargetDelete: cascade}
`

// TestUndeleteInsideACascadeThroughTheBinary (issue 32, points 4 and 6):
// what a cascade put in its grace window is undeleted while its owner is
// still Deleting, and the owner then finishes without it; the resources
// a cascade reached name its root in explain, describe and the audit log.
func TestUndeleteInsideACascadeThroughTheBinary(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, _ func(string, ...any)) {
		e.ok("apply", "-f", e.writeFile("o.yaml", cascadeWithWindows))
		r := e.run("delete", "App", "o", "-n", "prod", "--yes", "--wait")
		require.Equal(t, 3, r.code, "%s", r)

		// Point 6: the root, two levels down.
		r = e.ok("explain", "Disk", "e", "-n", "prod")
		require.True(t, strings.HasPrefix(r.stdout, "Disk/prod/e (Deleting, in the cascade of App/prod/o) [stuck]: "), "%s", r)
		r = e.ok("explain", "Disk", "e", "-n", "prod", "-o", "json")
		var ex struct {
			Root *catalog.ObjectRef `json:"deletionRoot"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex))
		require.NotNil(t, ex.Root)
		require.Equal(t, catalog.Key{Kind: "App", Namespace: "prod", Name: "o"}, ex.Root.Key())
		r = e.ok("describe", "Disk", "e", "-n", "prod")
		require.Contains(t, r.stdout, "Cascade of:  App/prod/o ")
		r = e.ok("describe", "Disk", "e", "-n", "prod", "-o", "yaml")
		require.Contains(t, r.stdout, "deletionRoot:")
		r = e.ok("audit", "--kind", "Disk", "--name", "e")
		require.Contains(t, r.stdout, "cascade-delete")
		require.Contains(t, r.stdout, "owner Volume/prod/d2 deleted (Foreground), in the cascade of App/prod/o")

		// Point 4: undeleted inside the cascade, they leave it.
		r = e.ok("undelete", "Volume", "d1", "-n", "prod")
		require.Contains(t, r.stdout, "Volume/prod/d1: it leaves the deletions in progress that reached it: owner App/o (removed, audited as leave-cascade)")
		r = e.ok("undelete", "Report", "x", "-n", "prod", "-o", "json")
		require.Contains(t, r.stdout, "its cascade reference to App/prod/o")
		e.ok("finalize", "Disk", "e", "-n", "prod", "example.com/keep")
		r = e.ok("delete", "App", "o", "-n", "prod", "--yes", "--wait")
		require.Contains(t, r.stdout, "App/prod/o: purged")
		for _, k := range [][]string{{"Volume", "d1"}, {"Report", "x"}} {
			r = e.ok("get", k[0], k[1], "-n", "prod", "-o", "json")
			var o struct {
				Metadata struct {
					Owners []catalog.OwnerRef `json:"ownerReferences"`
				} `json:"metadata"`
				References []catalog.Reference `json:"references"`
				Lifecycle  struct {
					Phase catalog.Phase `json:"phase"`
				} `json:"lifecycle"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &o))
			require.Equal(t, catalog.PhaseActive, o.Lifecycle.Phase, "%s", r)
			require.Empty(t, o.Metadata.Owners, "%s", r)
			require.Empty(t, o.References, "%s", r)
			r = e.ok("audit", "--kind", k[0], "--name", k[1])
			require.Contains(t, r.stdout, "leave-cascade", "%s", r)
			require.Contains(t, r.stdout, "App/prod/o (Deleting)", "%s", r)
		}
		r = e.ok("explain", "Disk", "e", "-n", "prod")
		require.Contains(t, r.stdout, "Disk/prod/e (Purged, in the cascade of App/prod/o)")
	})
}

// TestServerFinishesAnOwnerOnceItsDependentIsUndeleted: with lethe
// server carrying the cascade (delete --async), undeleting the dependent
// in its grace window wakes the server's collector, which purges the
// owner without it within seconds (its recheck is minutes away).
func TestServerFinishesAnOwnerOnceItsDependentIsUndeleted(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, _ func(string, ...any)) {
		e.ok("apply", "-f", e.writeFile("o.yaml", `kind: App
metadata: {name: o, namespace: prod}
---
kind: Volume
metadata:
  name: d1
  namespace: prod
  annotations: {lethe.io/deletion-delay: 1h}
  ownerReferences: [{kind: App, name: o, blockOwnerDeletion: true}]
`))
		srv := e.start("server", "--no-plugins", "--metrics-addr", freePort(t))
		defer func() {
			if !srv.exited() {
				_ = srv.cmd.Process.Signal(syscall.SIGTERM)
				srv.wait(t)
			}
		}()
		e.ok("delete", "App", "o", "-n", "prod", "--yes", "--async")
		deadline := time.Now().Add(60 * time.Second)
		for {
			d1, _ := e.getResource("Volume", "prod", "d1")
			if d1.Phase == "Scheduled" {
				break
			}
			require.False(t, srv.exited(), "server exited")
			require.True(t, time.Now().Before(deadline), "d1 never Scheduled: %s", d1.Phase)
			time.Sleep(100 * time.Millisecond)
		}
		e.ok("undelete", "Volume", "d1", "-n", "prod")
		undone := time.Now()
		for {
			_, code := e.getResource("App", "prod", "o")
			if code == 4 {
				break
			}
			require.False(t, srv.exited(), "server exited")
			require.Less(t, time.Since(undone), 20*time.Second, "the server did not finish the owner after the undelete")
			time.Sleep(100 * time.Millisecond)
		}
		d1, _ := e.getResource("Volume", "prod", "d1")
		require.Equal(t, "Active", d1.Phase)
		require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
		r := srv.wait(t)
		require.Equal(t, 0, r.code, "%s", r)
	})
}
