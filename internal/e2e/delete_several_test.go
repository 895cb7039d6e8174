package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeleteTakesSeveralNamesOrASelector: as kubectl, 'lethe delete KIND
// NAME NAME...' and 'lethe delete KIND -l SELECTOR' delete every resource
// named or selected, checked together first: one missing name changes
// nothing. Backups go through 'lethe backup delete', which takes both.
func TestDeleteTakesSeveralNamesOrASelector(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, _ func(string, ...any)) {
		e.ok("apply", "-f", e.writeFile("db.yaml", `kind: Database
metadata: {name: orders, namespace: shop, labels: {team: db}}
---
kind: Database
metadata: {name: users, namespace: shop, labels: {team: db}}
---
kind: Database
metadata: {name: logs, namespace: shop}
---
kind: Database
metadata: {name: orders, namespace: other, labels: {team: db}}
`))
		phase := func(ns, name string) string {
			return strings.TrimSpace(e.ok("get", "Database", name, "-n", ns, "-o", "jsonpath={.lifecycle.phase}").stdout)
		}

		r := e.run("delete", "Database", "orders", "nope", "-n", "shop", "--yes", "--wait")
		require.Equal(t, 4, r.code, "%s", r)
		require.Equal(t, "Active", phase("shop", "orders"), "a missing name changed nothing")

		r = e.ok("delete", "Database", "-l", "team=db", "-n", "shop", "--dry-run")
		require.Contains(t, r.stdout, "Database/shop/orders")
		require.Contains(t, r.stdout, "Database/shop/users")
		require.NotContains(t, r.stdout, "logs")
		require.NotContains(t, r.stdout, "Database/other/orders")

		r = e.ok("delete", "Database", "-l", "team=db", "-n", "shop", "--yes", "--wait")
		require.Contains(t, r.stdout, "Database/shop/orders: purged")
		require.Contains(t, r.stdout, "Database/shop/users: purged")
		require.Equal(t, "Active", phase("shop", "logs"))
		require.Equal(t, "Active", phase("other", "orders"), "-l selects in -n's namespace only")

		e.ok("apply", "-f", e.writeFile("more.yaml", "kind: Database\nmetadata: {name: a, namespace: shop}\n---\nkind: Database\nmetadata: {name: b, namespace: shop}\n"))
		r = e.ok("delete", "Database", "a", "b", "-n", "shop", "--yes", "--wait")
		require.Contains(t, r.stdout, "Database/shop/a: purged")
		require.Contains(t, r.stdout, "Database/shop/b: purged")

		r = e.run("delete", "Database", "logs", "-l", "team=db", "-n", "shop")
		require.Equal(t, 2, r.code, "%s", r)
	})
}
