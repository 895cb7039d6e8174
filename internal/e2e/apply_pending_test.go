package e2e

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pendingShop is a database with a grace window, a service held by its
// own finalizer, and two bundles: one with a grace window, one whose
// members hold its deletion (one with a finalizer, one with its own
// grace window, which its cascade Schedules).
const pendingShop = `kind: Database
metadata: {name: orders, namespace: shop, labels: {team: db}, annotations: {lethe.io/deletion-delay: 1h}}
spec: {size: 10}
---
kind: Service
metadata: {name: web, namespace: shop, finalizers: [example.com/drain]}
spec: {port: 80}
---
kind: Bundle
metadata: {name: front, annotations: {lethe.io/deletion-delay: 1h}}
spec:
  resources:
  - name: cache
    object: {kind: Cache, metadata: {namespace: shop}, spec: {size: 1}}
---
kind: Bundle
metadata: {name: back}
spec:
  resources:
  - name: queue
    object: {kind: Queue, metadata: {namespace: shop, finalizers: [example.com/drain]}, spec: {size: 1}}
  - name: spare
    object: {kind: Queue, metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}, spec: {size: 2}}
`

// schedulePendingShop applies pendingShop and puts each of its resources
// in Scheduled or Deleting: orders and Bundle/front Scheduled (with
// lethe.io/deletion-scheduled-at), web Deleting (with lethe.io/cascade
// beside its own finalizer), Bundle/back Deleting with its member held.
func schedulePendingShop(e *env) {
	e.t.Helper()
	e.ok("apply", "-f", e.writeFile("pending.yaml", pendingShop))
	// First: its collector run would take web's lethe.io/cascade.
	r := e.run("delete", "bundle", "back", "--yes", "--wait")
	require.Equal(e.t, 3, r.code, "the member's finalizer holds it: %s", r)
	e.ok("delete", "Database", "orders", "-n", "shop", "--yes")
	e.ok("delete", "Service", "web", "-n", "shop", "--yes")
	e.ok("delete", "bundle", "front", "--yes")
}

// TestGetYAMLOfAResourcePendingDeletionAppliesBackUnchanged: what get
// prints of a Scheduled or Deleting resource (its
// lethe.io/deletion-scheduled-at annotation and lethe.io/ finalizers
// included) applies back as unchanged, exit 0, and writes nothing: a
// user-defined kind, a bundle with its members, a member on its own, and
// lists of them.
func TestGetYAMLOfAResourcePendingDeletionAppliesBackUnchanged(t *testing.T) {
	e := newEnv(t)
	schedulePendingShop(e)
	orders := e.ok("get", "Database", "orders", "-n", "shop", "-o", "yaml").stdout
	require.Contains(t, orders, "lethe.io/deletion-scheduled-at")
	require.Contains(t, orders, "phase: Scheduled")
	web := e.ok("get", "Service", "web", "-n", "shop", "-o", "yaml").stdout
	require.Contains(t, web, "- lethe.io/cascade")
	require.Contains(t, web, "phase: Deleting")
	require.Contains(t, e.ok("get", "bundle", "front", "-o", "yaml").stdout, "lethe.io/deletion-scheduled-at")
	require.Contains(t, e.ok("get", "bundle", "back", "-o", "yaml").stdout, "phase: Deleting")
	require.Contains(t, e.ok("get", "Queue", "queue", "-n", "shop", "-o", "yaml").stdout, "phase: Deleting")
	require.Contains(t, e.ok("get", "Queue", "spare", "-n", "shop", "-o", "yaml").stdout, "lethe.io/deletion-scheduled-at")
	for _, args := range [][]string{
		{"get", "Database", "orders", "-n", "shop"},
		{"get", "Service", "web", "-n", "shop"},
		{"get", "bundle", "front"},
		{"get", "bundle", "back"},
		{"get", "Cache", "cache", "-n", "shop"},
		{"get", "Queue", "queue", "-n", "shop"},
		{"get", "Queue", "spare", "-n", "shop"},
		{"get", "bundles"},
		{"get", "services", "-A"},
	} {
		for _, format := range []string{"yaml", "json"} {
			got := e.ok(append(args, "-o", format)...)
			for _, dry := range []bool{true, false} {
				apply := []string{"apply", "-f", "-", "-o", "json"}
				if dry {
					apply = append(apply, "--dry-run")
				}
				r := e.runStdin(got.stdout, apply...)
				require.Equal(t, 0, r.code, "%s\nfrom:\n%s", r, got.stdout)
				var rep applyReport
				require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), "%s", r)
				require.NotEmpty(t, rep.Changes)
				for _, c := range rep.Changes {
					assert.Equal(t, "unchanged", c.Action, "%v -o %s | apply: %s", args, format, r.stdout)
				}
				assert.Equal(t, got.stdout, e.ok(append(args, "-o", format)...).stdout, "%v: apply wrote something", args)
			}
		}
	}
}

// TestApplyRefusesAFieldLetheSetsUnlessTheCatalogHoldsIt: a
// lethe.io/deletion-scheduled-at annotation or a lethe.io/ finalizer that
// the stored resource does not hold as the document gives it (another
// value, a resource that has none, one that does not exist, a bundle's
// member object) is refused with one line naming the field, exit 2, and
// nothing of the apply is written: a manifest cannot schedule or
// finalize. A real change to a resource pending deletion stays the sync
// filter's: skipped, exit 3.
func TestApplyRefusesAFieldLetheSetsUnlessTheCatalogHoldsIt(t *testing.T) {
	e := newEnv(t)
	schedulePendingShop(e)
	e.ok("apply", "-f", e.writeFile("live.yaml", "kind: Database\nmetadata: {name: live, namespace: shop}\nspec: {size: 1}\n---\nkind: Database\nmetadata: {name: calm, namespace: shop}\n"))
	snapshot := func() string {
		return e.ok("get", "Database", "-A", "-o", "yaml").stdout + e.ok("get", "Service", "-A", "-o", "yaml").stdout +
			e.ok("get", "bundles", "-o", "yaml").stdout + e.ok("get", "Cache", "-A", "-o", "yaml").stdout
	}
	before := snapshot()
	orders := e.ok("get", "Database", "orders", "-n", "shop", "-o", "yaml").stdout
	web := e.ok("get", "Service", "web", "-n", "shop", "-o", "yaml").stdout
	live := e.ok("get", "Database", "live", "-n", "shop", "-o", "yaml").stdout
	calm := e.ok("get", "Database", "calm", "-n", "shop", "-o", "yaml").stdout
	liveChanged := strings.Replace(live, "size: 1", "size: 2", 1)
	require.NotEqual(t, live, liveChanged)
	scheduledAt := `metadata.annotations["lethe.io/deletion-scheduled-at"]: set by Lethe when a deletion is scheduled`
	for _, c := range []struct {
		name, doc, want string
	}{
		{"another scheduled-at", replaceRE(t, orders, `deletion-scheduled-at: "2\d\d\d`, `deletion-scheduled-at: "1999`),
			scheduledAt + ", and taken back only as the catalog holds it: Database/shop/orders has 2"},
		{"scheduled-at on an Active resource", strings.Replace(calm, "  name: calm\n", "  name: calm\n  annotations: {lethe.io/deletion-scheduled-at: x}\n", 1),
			scheduledAt},
		{"scheduled-at on a new resource", "kind: Database\nmetadata: {name: fresh, namespace: shop, annotations: {lethe.io/deletion-scheduled-at: x}}\n",
			scheduledAt + ", and taken back only as the catalog holds it: Database/shop/fresh does not exist"},
		{"a Lethe finalizer it does not have", strings.Replace(web, "- lethe.io/cascade", "- lethe.io/cascade\n  - lethe.io/delete-actions", 1),
			`metadata.finalizers[2]: finalizer "lethe.io/delete-actions" is Lethe's, added when a resource enters Deleting, and taken back only as the catalog holds it: Service/shop/web does not have it`},
		{"a Lethe finalizer on an Active resource", strings.Replace(calm, "  name: calm\n", "  name: calm\n  finalizers: [lethe.io/cascade]\n", 1),
			`metadata.finalizers[0]: finalizer "lethe.io/cascade" is Lethe's`},
		{"a Lethe finalizer in a bundle member", "kind: Bundle\nmetadata: {name: other}\nspec: {resources: [{name: m, object: {kind: Cache, metadata: {namespace: shop, finalizers: [lethe.io/cascade]}}}]}\n",
			`spec.resources[0].object.metadata.finalizers[0]: finalizer "lethe.io/cascade" is Lethe's, added when a resource enters Deleting, and taken back only as the catalog holds it: a bundle member's object cannot carry it`},
	} {
		require.NotContains(t, []string{orders, web, calm}, c.doc, c.name)
		for _, dry := range []bool{true, false} {
			args := []string{"apply", "-f", "-"}
			if dry {
				args = append(args, "--dry-run")
			}
			// The live database's change comes first: it is not written either.
			r := e.runStdin(liveChanged+"---\n"+c.doc, args...)
			requireOneErrorLine(t, r, c.want)
			assert.Equal(t, 2, r.code, "%s: %s", c.name, r)
			assert.Contains(t, r.stderr, "nothing was applied", "%s", r)
			assert.Equal(t, before, snapshot(), "%s: written", c.name)
		}
	}
	// A real change to a Scheduled or Deleting resource, Lethe's fields as
	// the catalog holds them: the sync filter skips it, exit 3.
	for _, doc := range []string{strings.Replace(orders, "size: 10", "size: 11", 1), strings.Replace(web, "port: 80", "port: 81", 1)} {
		r := e.runStdin(doc, "apply", "-f", "-")
		assert.Equal(t, 3, r.code, "%s", r)
		assert.Contains(t, r.stdout, "skipped", "%s", r)
	}
	assert.Equal(t, before, snapshot(), "the sync filter wrote something")
}

// replaceRE replaces the first match of expr in s, which must have one.
func replaceRE(t *testing.T, s, expr, repl string) string {
	t.Helper()
	re := regexp.MustCompile(expr)
	loc := re.FindStringIndex(s)
	require.NotNil(t, loc, "%s not in\n%s", expr, s)
	return s[:loc[0]] + repl + s[loc[1]:]
}
