package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// roundTripShop is the README's bundle walkthrough: web with a grace
// window, worker without.
const roundTripShop = `kind: Bundle
metadata: {name: shop}
spec:
  resources:
  - name: web
    object:
      kind: Service
      metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}
  - name: worker
    object:
      kind: Service
      metadata: {namespace: shop}
`

// applyBundleBack pipes get bundle shop -o FORMAT into apply (dry run and
// not) and requires exit 0, every row unchanged with the given reasons
// (by member name), a summary counting them unchanged, and nothing
// written.
func applyBundleBack(e *env, reasons map[string]string) {
	e.t.Helper()
	for _, format := range []string{"yaml", "json"} {
		got := e.ok("get", "bundle", "shop", "-o", format).stdout
		for _, dry := range []bool{true, false} {
			args := []string{"apply", "-f", "-", "-o", "json"}
			if dry {
				args = append(args, "--dry-run")
			}
			r := e.runStdin(got, args...)
			require.Equal(e.t, 0, r.code, "%s\nfrom:\n%s", r, got)
			var rep applyReport
			require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &rep), "%s", r)
			seen := map[string]string{}
			for _, c := range rep.Changes {
				assert.Equal(e.t, "unchanged", c.Action, "-o %s | apply: %s", format, r.stdout)
				seen[c.Resource.Name] = c.Reason
			}
			for name, reason := range reasons {
				assert.Equal(e.t, reason, seen[name], "the reason of %s: %s", name, r.stdout)
			}
			assert.Equal(e.t, got, e.ok("get", "bundle", "shop", "-o", format).stdout, "apply wrote something")
		}
		r := e.runStdin(got, "apply", "-f", "-")
		require.Equal(e.t, 0, r.code, "%s", r)
		assert.NotContains(e.t, r.stdout+r.stderr, "scheduled")
		assert.NotContains(e.t, r.stdout+r.stderr, "deleted")
		assert.NotContains(e.t, r.stdout+r.stderr, "skipped")
		assert.NotContains(e.t, r.stderr, "pending deletion")
	}
}

// TestRoundTripOfABundleWhoseDeletionPurgedAMemberIsUnchanged: after
// 'lethe delete Bundle shop --wait' purged worker and left web Scheduled
// and shop Deleting, what get prints of the bundle (which still lists
// worker) applies back unchanged, exit 0, nothing written: not skipped
// by the sync filter.
func TestRoundTripOfABundleWhoseDeletionPurgedAMemberIsUnchanged(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("bundle.yaml", roundTripShop))
	r := e.run("delete", "Bundle", "shop", "--yes", "--wait")
	require.Equal(t, 3, r.code, "web's window holds the bundle: %s", r)
	require.Equal(t, 4, e.run("get", "Service", "worker", "-n", "shop").code, "worker is purged")
	require.Contains(t, e.ok("get", "bundle", "shop", "-o", "yaml").stdout, "phase: Deleting")
	require.Contains(t, e.ok("get", "bundle", "shop", "-o", "yaml").stdout, "worker")
	applyBundleBack(e, map[string]string{"worker": "purged; its bundle is Deleting"})
}

// TestRoundTripOfABundleWithAMemberPrunedEarlierIsUnchanged: once a
// member was pruned (Scheduled by its grace window, or Deleting), what
// get prints of the bundle applies back with that member unchanged (its
// reason says how far its deletion is), counted unchanged, nothing
// written.
func TestRoundTripOfABundleWithAMemberPrunedEarlierIsUnchanged(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("bundle.yaml", roundTripShop))
	v2 := strings.Replace(roundTripShop, `  - name: web
    object:
      kind: Service
      metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}
`, "", 1)
	require.NotEqual(t, roundTripShop, v2)
	e.ok("apply", "-f", e.writeFile("v2.yaml", v2))
	require.Contains(t, e.ok("get", "Service", "web", "-n", "shop", "-o", "yaml").stdout, "phase: Scheduled")
	applyBundleBack(e, map[string]string{"web": "pruned earlier; counting down", "worker": ""})

	v3 := strings.Replace(v2, `  - name: worker
    object:
      kind: Service
      metadata: {namespace: shop}
`, "", 1)
	v3 = strings.Replace(v3, "  resources:\n", "  resources: []\n", 1)
	e.ok("apply", "-f", e.writeFile("v3.yaml", v3))
	require.Contains(t, e.ok("get", "Service", "worker", "-n", "shop", "-o", "yaml").stdout, "phase: Deleting")
	applyBundleBack(e, map[string]string{"web": "pruned earlier; counting down", "worker": "pruned earlier; Deleting"})
}
