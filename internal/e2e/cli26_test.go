package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackupGetAndDescribeSelectAsBackupList: backup get -l and backup
// describe --selector (as velero backup get -l) list exactly what
// backup list -l lists, in every output.
func TestBackupGetAndDescribeSelectAsBackupList(t *testing.T) {
	e := newEnv(t)
	e.create("n1", 2, "--labels", "app=shop")
	e.create("n2", 2, "--labels", "app=web")
	for _, o := range []string{"table", "json"} {
		want := e.ok("backup", "list", "-l", "app=shop", "-o", o).stdout
		assert.Contains(t, want, "n1")
		assert.NotContains(t, want, "n2")
		assert.Equal(t, want, e.ok("backup", "get", "-l", "app=shop", "-o", o).stdout, o)
		assert.Equal(t, want, e.ok("backup", "describe", "--selector", "app=shop", "-o", o).stdout, o)
	}
	assert.Contains(t, e.ok("backup", "get", "-l", "app=none").stdout, "No backups")
}

// TestNameWithSelectorIsRefusedNotIgnored: a NAME together with
// -l/--selector exits 2 with one line and changes nothing, as kubectl
// refuses it, for get, describe, backup get/describe and delete.
func TestNameWithSelectorIsRefusedNotIgnored(t *testing.T) {
	e := newEnv(t)
	e.create("n2", 2, "--labels", "app=shop")
	e.ok("apply", "-f", e.writeFile("dbs.yaml", "kind: Database\nmetadata: {name: orders, namespace: shop, labels: {team: db}}\n"))
	for _, args := range [][]string{
		{"get", "backup", "n2", "-l", "app=nomatch"},
		{"get", "database", "orders", "-n", "shop", "-l", "team=nomatch"},
		{"describe", "database", "orders", "-n", "shop", "-l", "team=db"},
		{"backup", "get", "n2", "-l", "app=shop"},
		{"backup", "describe", "n2", "--selector", "app=shop"},
		{"delete", "database", "orders", "-n", "shop", "-l", "team=nomatch", "--yes", "--wait"},
		{"backup", "delete", "n2", "-l", "app=shop", "--yes"},
	} {
		r := e.run(args...)
		assert.Equal(t, 2, r.code, "%s", r)
		switch strings.Join(args[:2], " ") {
		case "backup delete": // as before: its own wording
			requireOneErrorLine(t, r, "cannot be combined")
		case "delete database":
			requireOneErrorLine(t, r, "with -l, give only KIND")
		default:
			requireOneErrorLine(t, r, "a NAME and -l/--selector cannot be given together")
		}
		assert.Empty(t, r.stdout, "%s", r)
	}
	e.ok("get", "database", "orders", "-n", "shop")
	assert.Equal(t, "Active", e.get("n2").Phase)
}

// TestDescribeKindDescribesEverySelectedResource: describe KIND (no
// NAME) describes each resource of KIND in -n's namespace (or all), or
// those -l selects, separated by a blank line; -o json is a
// DescriptionList; nothing selected is not an error.
func TestDescribeKindDescribesEverySelectedResource(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("dbs.yaml", `kind: Database
metadata: {name: orders, namespace: shop, labels: {team: db}}
---
kind: Database
metadata: {name: users, namespace: shop}
---
kind: Database
metadata: {name: ledger, namespace: prod, labels: {team: db}}
`))
	names := func(out string) []string {
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if n, ok := strings.CutPrefix(l, "Name:"); ok {
				got = append(got, strings.TrimSpace(n))
			}
		}
		return got
	}
	all := e.ok("describe", "databases").stdout
	assert.ElementsMatch(t, []string{"orders", "users", "ledger"}, names(all))
	assert.Equal(t, 2, strings.Count(all, "\n\nKind:"), "one blank line between descriptions: %s", all)
	assert.ElementsMatch(t, []string{"orders", "users"}, names(e.ok("describe", "databases", "-n", "shop").stdout))
	assert.ElementsMatch(t, []string{"orders", "ledger"}, names(e.ok("describe", "Database", "-l", "team=db").stdout))
	assert.Equal(t, e.ok("describe", "database", "orders", "-n", "shop").stdout,
		e.ok("describe", "databases", "-n", "shop", "-l", "team=db").stdout, "one selected: the same text as describe KIND NAME")

	r := e.ok("describe", "databases", "-l", "team=db", "-o", "json")
	m := requireObject(t, r, "DescriptionList")
	items, ok := m["items"].([]any)
	require.True(t, ok, "%s", r)
	require.Len(t, items, 2)
	var got []string
	for _, it := range items {
		res := it.(map[string]any)["resource"].(map[string]any)
		got = append(got, res["metadata"].(map[string]any)["name"].(string))
	}
	assert.ElementsMatch(t, []string{"orders", "ledger"}, got)
	assert.Contains(t, e.ok("describe", "databases", "-l", "team=none").stdout, "No Database resources")
}

// TestAuditFiltersByNamespace: audit -n keeps only that namespace's
// entries.
func TestAuditFiltersByNamespace(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("svc.yaml", "kind: Service\nmetadata: {name: web, namespace: shop}\n---\nkind: Service\nmetadata: {name: web, namespace: prod}\n"))
	nss := func(args ...string) []string {
		var l struct {
			Items []struct {
				Resource struct {
					Namespace string `json:"namespace"`
				} `json:"resource"`
			} `json:"items"`
		}
		r := e.ok(append([]string{"audit", "--kind", "Service", "--name", "web", "-o", "json"}, args...)...)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), "%s", r)
		var got []string
		for _, it := range l.Items {
			got = append(got, it.Resource.Namespace)
		}
		return got
	}
	assert.ElementsMatch(t, []string{"shop", "prod"}, nss())
	assert.Equal(t, []string{"shop"}, nss("-n", "shop"))
	assert.Equal(t, []string{"prod"}, nss("--namespace", "prod"))
	assert.Empty(t, nss("-n", "dev"))
}

// TestUnknownKindSuggestsTheKindItAbbreviates: a kind typed as a prefix
// or abbreviation of a known kind (db, dat) gets "did you mean" that
// kind; bsl is BackupStorageLocation, as Velero's short name.
func TestUnknownKindSuggestsTheKindItAbbreviates(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("dbs.yaml", "kind: Database\nmetadata: {name: orders, namespace: shop}\n"))
	for _, typed := range []string{"db", "dat", "DB"} {
		r := e.run("get", typed)
		assert.Equal(t, 4, r.code, "%s", r)
		requireOneErrorLine(t, r, "the catalog has never held a resource of kind "+typed+"; did you mean Database?")
	}
	r := e.run("get", "zq")
	assert.Equal(t, 4, r.code, "%s", r)
	assert.NotContains(t, r.stderr, "did you mean", "%s", r)
	want := e.ok("get", "BackupStorageLocations").stdout
	assert.Contains(t, want, "BackupStorageLocation")
	for _, typed := range []string{"bsl", "BSL", "backupstoragelocation"} {
		assert.Equal(t, want, e.ok("get", typed).stdout, typed)
	}
}

// TestDescribeKindIsBounded: describe KIND describes at most 100
// resources and counts the others in a warning on stderr.
func TestDescribeKindIsBounded(t *testing.T) {
	e := newEnv(t)
	var b strings.Builder
	for i := range 102 {
		fmt.Fprintf(&b, "---\nkind: Database\nmetadata: {name: db-%03d, namespace: shop}\n", i)
	}
	e.ok("apply", "-f", e.writeFile("dbs.yaml", b.String()))
	r := e.ok("describe", "databases")
	assert.Equal(t, 100, strings.Count(r.stdout, "\nName:"), "%s", r.stderr)
	assert.Contains(t, r.stderr, "Warning: 2 more Database resources not described (at most 100)")
	m := requireObject(t, e.ok("describe", "databases", "-o", "json"), "DescriptionList")
	assert.Len(t, m["items"], 100)
}
