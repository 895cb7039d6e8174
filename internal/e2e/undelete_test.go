package e2e

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const undeleteShop = `kind: Database
metadata: {name: orders, namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}
---
kind: Bundle
metadata: {name: front, annotations: {lethe.io/deletion-delay: 1h}}
spec:
  resources:
  - name: keep
    object: {kind: Service, metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}, spec: {port: 80}}
  - name: web
    object: {kind: Service, metadata: {namespace: shop}, spec: {port: 81}}
`

// TestUndeleteCancelsAScheduledDeletionOfAnyKind: lethe undelete KIND
// NAME returns a Scheduled resource of any kind to Active: a resource, a
// bundle, a bundle member pruned with a delay, a backup (backup undelete
// is its alias); each step a new process on the same catalog, each
// undelete audited in the name of the person who ran it. What is not
// Scheduled is refused (exit 2); what does not exist exits 4 unless
// --ignore-not-found.
func TestUndeleteCancelsAScheduledDeletionOfAnyKind(t *testing.T) {
	e := newEnv(t, pluginNoop)
	shop := e.writeFile("shop.yaml", undeleteShop)
	e.ok("apply", "-f", shop)
	phase := func(kind, ns, name string) string {
		t.Helper()
		r, code := e.getResource(kind, ns, name)
		require.Equal(t, 0, code)
		return r.Phase
	}

	// A resource of any kind, and a bundle: scheduled, then undeleted.
	e.ok("delete", "Database", "orders", "-n", "shop", "--yes")
	e.ok("delete", "bundle", "front", "--yes")
	require.Equal(t, "Scheduled", phase("Database", "shop", "orders"))
	require.Equal(t, "Scheduled", phase("Bundle", "", "front"))
	r := e.ok("undelete", "databases", "orders", "-n", "shop")
	assert.Contains(t, r.stdout, "Database/shop/orders: scheduled deletion cancelled")
	r = e.ok("undelete", "bundle", "front", "-o", "json")
	requireObject(t, r, "UndeleteResult")
	assert.Equal(t, "Active", phase("Database", "shop", "orders"))
	assert.Equal(t, "Active", phase("Bundle", "", "front"))

	// A member pruned with a delay is Scheduled; undelete brings it back.
	e.ok("apply", "-f", e.writeFile("less.yaml", `kind: Bundle
metadata: {name: front, annotations: {lethe.io/deletion-delay: 1h}}
spec:
  resources:
  - name: web
    object: {kind: Service, metadata: {namespace: shop}, spec: {port: 81}}
`))
	require.Equal(t, "Scheduled", phase("Service", "shop", "keep"))
	e.ok("undelete", "Service", "keep", "-n", "shop")
	assert.Equal(t, "Active", phase("Service", "shop", "keep"))

	// Audited, in the name of whoever ran it.
	r = e.ok("audit", "--kind", "Database", "--name", "orders", "-o", "json")
	var undeletes int
	for _, it := range listItems(t, r.stdout, "AuditEntry") {
		var a struct{ Action, Actor string }
		require.NoError(t, json.Unmarshal(it, &a))
		if a.Action == "undelete" {
			undeletes++
			assert.Contains(t, a.Actor, "cli:")
		}
	}
	assert.Equal(t, 1, undeletes, "%s", r)

	// -f: every resource a manifest names, all checked first.
	e.ok("delete", "Database", "orders", "-n", "shop", "--yes")
	e.ok("delete", "Bundle", "front", "--yes")
	r = e.ok("undelete", "-f", e.writeFile("two.yaml", "kind: Database\nmetadata: {name: orders, namespace: shop}\n---\nkind: Bundle\nmetadata: {name: front}\n"), "-o", "json")
	requireObject(t, r, "UndeleteResultList")
	assert.Equal(t, "Active", phase("Database", "shop", "orders"))
	assert.Equal(t, "Active", phase("Bundle", "", "front"))

	// One of them not Scheduled: refused before anything changes.
	e.ok("delete", "Database", "orders", "-n", "shop", "--yes")
	r = e.run("undelete", "-f", e.writeFile("two.yaml", "kind: Database\nmetadata: {name: orders, namespace: shop}\n---\nkind: Bundle\nmetadata: {name: front}\n"))
	assert.Equal(t, 2, r.code, "%s", r)
	requireOneErrorLine(t, r, "Bundle/front has no deletion scheduled")
	assert.Equal(t, "Scheduled", phase("Database", "shop", "orders"), "a refused undelete -f changed something")
	e.ok("undelete", "Database", "orders", "-n", "shop")

	// A backup, through both commands.
	e.create("b1", 2, "--deletion-delay", "1h")
	e.ok("backup", "delete", "b1", "--yes")
	require.Equal(t, "Scheduled", e.get("b1").Phase)
	e.ok("undelete", "bk", "b1")
	require.Equal(t, "Active", e.get("b1").Phase)
	e.ok("backup", "delete", "b1", "--yes")
	e.ok("backup", "undelete", "b1")
	require.Equal(t, "Active", e.get("b1").Phase)

	// Not Scheduled: refused, exit 2, nothing changed.
	r = e.run("undelete", "Database", "orders", "-n", "shop")
	assert.Equal(t, 2, r.code, "%s", r)
	requireOneErrorLine(t, r, "Database/shop/orders has no deletion scheduled (it is Active)")
	r = e.run("backup", "undelete", "b1")
	assert.Equal(t, 2, r.code, "%s", r)
	// Missing: exit 4, unless --ignore-not-found.
	r = e.run("undelete", "Database", "nope", "-n", "shop")
	assert.Equal(t, 4, r.code, "%s", r)
	requireOneErrorLine(t, r, `Database "shop/nope" not found`)
	r = e.ok("undelete", "Database", "nope", "-n", "shop", "--ignore-not-found")
	assert.Contains(t, r.stdout, "not found (ignored)")
	e.ok("backup", "undelete", "nope", "--ignore-not-found")
	// finalize takes --ignore-not-found too.
	r = e.run("finalize", "Database", "nope", "-n", "shop", "example.com/x")
	assert.Equal(t, 4, r.code, "%s", r)
	r = e.ok("finalize", "Database", "nope", "-n", "shop", "example.com/x", "--ignore-not-found")
	assert.Contains(t, r.stdout, "not found (ignored)")
	r = e.run("undelete", "Database")
	assert.Equal(t, 2, r.code, "%s", r)
}
