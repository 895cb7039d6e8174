package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// update rewrites testdata/output/*.golden from what the binary prints:
// go test ./internal/e2e -run TestOutputSchema -update
var update = flag.Bool("update", false, "rewrite testdata/output/*.golden")

var (
	uidRE    = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timeRE   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	sha256RE = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	durRE    = regexp.MustCompile(`"(duration|elapsed|modTimeNs|inode|retried)": \d+`)
	actorRE  = regexp.MustCompile(`"actor": "cli:[^"]*"`)
)

// golden compares out, its uids, times, digests, paths and timing-dependent
// counters (a work item's retried count) replaced, with
// testdata/output/NAME.golden.
func (e *env) golden(name, out string) {
	e.t.Helper()
	out = strings.ReplaceAll(out, e.home, "<home>")
	out = strings.ReplaceAll(out, e.dir, "<dir>")
	out = uidRE.ReplaceAllString(out, "<uid>")
	out = timeRE.ReplaceAllString(out, "<time>")
	out = sha256RE.ReplaceAllString(out, "<sha256>")
	out = durRE.ReplaceAllString(out, `"$1": <n>`)
	out = actorRE.ReplaceAllString(out, `"actor": "cli:<user>"`)
	path := filepath.Join("testdata", "output", name+".golden")
	if *update {
		require.NoError(e.t, os.MkdirAll(filepath.Dir(path), 0o750))
		require.NoError(e.t, os.WriteFile(path, []byte(out), 0o600))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(e.t, err, "run with -update to write it")
	assert.Equal(e.t, string(want), out, "%s: the shape changed; if on purpose, run with -update and update docs/output.md", name)
}

// runStdin runs lethe with stdin.
func (e *env) runStdin(stdin string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, out, errb := e.command(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
	if r.code < 0 {
		e.t.Fatalf("lethe %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// requireObject checks the rule every -o json output keeps
// (docs/output.md): apiVersion lethe.io/v1 and the kind; a list's items
// each have them too.
func requireObject(t *testing.T, r result, kind string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m), "%s", r)
	require.Equal(t, "lethe.io/v1", m["apiVersion"], "%s", r)
	require.Equal(t, kind, m["kind"], "%s", r)
	if items, ok := m["items"].([]any); ok {
		require.True(t, strings.HasSuffix(kind, "List"), "%s", r)
		for _, it := range items {
			o := it.(map[string]any)
			require.Equal(t, "lethe.io/v1", o["apiVersion"], "%s", r)
			require.Equal(t, strings.TrimSuffix(kind, "List"), o["kind"], "%s", r)
		}
	}
	return m
}

const schemaShop = `kind: Database
metadata: {name: orders, namespace: shop, labels: {team: db}}
spec: {size: 10}
status: {ready: true}
---
kind: Service
metadata: {name: web, namespace: shop, finalizers: [example.com/drain]}
references:
- {kind: Database, namespace: shop, name: orders, onTargetDelete: block}
spec: {port: 80}
---
kind: Bundle
metadata: {name: front}
spec:
  resources:
  - name: cache
    object: {kind: Cache, metadata: {namespace: shop}, spec: {size: 1}}
`

// TestOutputSchemaIsOneShapePerCommand pins, by a golden file per
// command, the -o json shape of every command that prints objects, and
// checks the rules of docs/output.md on each.
func TestOutputSchemaIsOneShapePerCommand(t *testing.T) {
	e := newEnv(t, pluginNoop)
	shop := e.writeFile("shop.yaml", schemaShop)
	tmp := e.writeFile("tmp.yaml", "kind: Tmp\nmetadata: {name: t, namespace: shop}\n")
	cases := []struct {
		golden string
		kind   string
		args   []string
		code   int
	}{
		{"apply", "ApplyReport", []string{"apply", "-f", shop, "-o", "json"}, 0},
		{"get", "Database", []string{"get", "Database", "orders", "-n", "shop", "-o", "json"}, 0},
		{"get-list", "DatabaseList", []string{"get", "databases", "-o", "json"}, 0},
		{"get-bundle", "Bundle", []string{"get", "bundle", "front", "-o", "json"}, 0},
		{"describe", "Description", []string{"describe", "Database", "orders", "-n", "shop", "-o", "json"}, 0},
		{"audit", "AuditEntryList", []string{"audit", "--kind", "Database", "-o", "json"}, 0},
		{"explain", "Explanation", []string{"explain", "Service", "web", "-n", "shop", "-o", "json"}, 0},
		{"delete-plan", "CascadePlan", []string{"delete", "Service", "web", "-n", "shop", "--dry-run", "-o", "json"}, 0},
		{"delete-file-plan", "CascadePlanList", []string{"delete", "-f", shop, "--dry-run", "-o", "json"}, 0},
		{"backup-get", "Backup", []string{"backup", "get", "b1", "-o", "json"}, 0},
		{"backup-list", "BackupList", []string{"backup", "list", "-o", "json"}, 0},
		{"backup-describe-details", "BackupDescription", []string{"backup", "describe", "b1", "--details", "-o", "json"}, 0},
		{"backup-delete-plan", "DeletionPlan", []string{"backup", "delete", "b1", "--dry-run", "-o", "json"}, 0},
		{"backup-delete-plans", "DeletionPlanList", []string{"backup", "delete", "-l", "team=db", "--dry-run", "-o", "json"}, 0},
		{"backup-delete-none", "DeletionPlanList", []string{"backup", "delete", "-l", "team=none", "--dry-run", "-o", "json"}, 0},
		{"delete-stuck", "DeletionResult", []string{"delete", "Service", "web", "-n", "shop", "--yes", "--wait", "-o", "json"}, 3},
		{"retry-list", "RetryItemList", []string{"retry", "list", "-o", "json"}, 0},
		{"retry-get", "RetryItem", []string{"retry", "get", "1", "-o", "json"}, 0},
		{"retry-now", "RetryItemList", []string{"retry", "now", "1", "--dry-run", "-o", "json"}, 0},
		{"plugin-list", "PluginList", []string{"plugin", "list", "-o", "json"}, 0},
		{"backup-delete", "DeletionReport", []string{"backup", "delete", "b1", "--yes", "-o", "json"}, 0},
		{"delete", "DeletionResult", []string{"delete", "Cache", "cache", "-n", "shop", "--yes", "--wait", "-o", "json"}, 0},
		{"delete-file", "DeletionResultList", []string{"delete", "-f", tmp, "--yes", "--wait", "-o", "json"}, 0},
		{"undelete", "UndeleteResult", []string{"undelete", "bk", "b3", "-o", "json"}, 0},
		{"backup-sync", "SyncResultList", []string{"backup", "sync", "--dry-run", "-o", "json"}, 0},
		{"plugin-lock", "LockEntryList", []string{"plugin", "lock", "--dry-run", "-o", "json"}, 0},
		{"status", "Status", []string{"status", "-o", "json"}, 0},
		{"location-get", "LocationStatus", []string{"location", "get", "default", "-o", "json"}, 0},
		{"location-list", "LocationStatusList", []string{"location", "list", "-o", "json"}, 0},
	}
	for _, c := range cases {
		switch c.golden {
		case "backup-get":
			e.create("b1", 3, "--label", "team=db")
		case "delete-file":
			e.ok("apply", "-f", tmp)
		case "undelete":
			e.create("b3", 2, "--deletion-delay", "1h")
			e.ok("backup", "delete", "b3", "--yes")
		case "backup-sync":
			found := filepath.Join(e.storageDir(), "backups", "found", "found.tar.gz")
			require.NoError(t, os.MkdirAll(filepath.Dir(found), 0o750))
			copyFile(t, e.writeTarball("found", 2), found, 0o640)
		}
		r := e.run(c.args...)
		require.Equal(t, c.code, r.code, "%s", r)
		requireObject(t, r, c.kind)
		e.golden(c.golden, r.stdout)
		if c.golden == "backup-get" {
			// get backup X and backup get X print the same object.
			assert.Equal(t, r.stdout, e.ok("get", "backup", "b1", "-o", "json").stdout)
			assert.Equal(t, r.stdout, e.ok("get", "bk", "b1", "-o", "json").stdout)
		}
	}
	requireObject(t, e.ok("version", "-o", "json"), "Version")
}

// TestGetYAMLAppliesBackUnchangedForEveryKind: what get -o yaml (or
// json) prints, apply takes back as it is (apiVersion, uid, timestamps
// and lifecycle included) and changes nothing, for every kind get prints:
// a user-defined kind, a bundle, a bundle member on its own, a Backup, a
// storage location, and lists of them.
func TestGetYAMLAppliesBackUnchangedForEveryKind(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("shop.yaml", schemaShop))
	e.create("b1", 3, "--labels", "team=db", "--ttl", "720h")
	e.ok("backup", "sync") // records the default location
	for _, args := range [][]string{
		{"get", "Database", "orders", "-n", "shop"},
		{"get", "Service", "web", "-n", "shop"},
		{"get", "Bundle", "front"},
		{"get", "Cache", "cache", "-n", "shop"}, // the member of Bundle/front
		{"get", "backup", "b1"},
		{"backup", "get", "b1"},
		{"get", "backupstoragelocation", "default"},
		{"get", "services"},
		{"get", "backups"},
		{"backup", "list"},
		{"get", "caches"},
	} {
		for _, format := range []string{"yaml", "json"} {
			got := e.ok(append(args, "-o", format)...)
			r := e.runStdin(got.stdout, "apply", "-f", "-", "-o", "json")
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
	// An apiVersion Lethe does not speak is refused, in one line.
	r := e.runStdin("apiVersion: v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\n", "apply", "-f", "-")
	requireOneErrorLine(t, r, "apiVersion: want lethe.io/v1")
	assert.Equal(t, 1, r.code, "a refused manifest (README's exit codes): %s", r)
}

// TestApplyRefusesAChangeToABackupOrAMemberNamingTheField: a document
// get printed, edited where apply cannot write (a Backup is Lethe's, a
// member's fields are its bundle's), is refused with one line naming the
// field, exit 2, and nothing of the apply is written, not even the
// documents beside it that apply could write.
func TestApplyRefusesAChangeToABackupOrAMemberNamingTheField(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("shop.yaml", schemaShop))
	e.create("b1", 3, "--labels", "team=db")
	e.ok("backup", "sync")
	db := e.ok("get", "Database", "orders", "-n", "shop", "-o", "yaml").stdout
	dbChanged := strings.Replace(db, "size: 10", "size: 20", 1)
	require.NotEqual(t, db, dbChanged)
	for _, c := range []struct {
		get       []string
		from, to  string
		field     string
		bundleMsg bool
	}{
		{[]string{"get", "backup", "b1"}, "items: 3", "items: 4", "spec: apply cannot change a Backup's spec", false},
		{[]string{"get", "backup", "b1"}, "team: db", "team: web", "metadata.labels: apply cannot change a Backup's metadata.labels", false},
		{[]string{"get", "backup", "b1"}, "  name: b1\n", "  name: b1\n  annotations: {a: b}\n", "metadata.annotations: apply cannot change a Backup's", false},
		{[]string{"get", "backupstoragelocation", "default"}, "default: true", "default: false", "spec: apply cannot change a BackupStorageLocation's spec", false},
		{[]string{"get", "Cache", "cache", "-n", "shop"}, "size: 1", "size: 2", "spec: Cache/shop/cache is a member of Bundle/front, which owns its spec", true},
		{[]string{"get", "Cache", "cache", "-n", "shop"}, "  name: cache\n", "  name: cache\n  labels: {a: b}\n", "metadata.labels: Cache/shop/cache is a member of Bundle/front", true},
		{[]string{"get", "Cache", "cache", "-n", "shop"}, "blockOwnerDeletion: true", "blockOwnerDeletion: false", "metadata.ownerReferences: Cache/shop/cache is a member of Bundle/front", true},
	} {
		before := e.ok(append(c.get, "-o", "yaml")...).stdout
		edited := strings.Replace(before, c.from, c.to, 1)
		require.NotEqual(t, before, edited, "%v: %q not in\n%s", c.get, c.from, before)
		for _, dry := range []bool{true, false} {
			args := []string{"apply", "-f", "-"}
			if dry {
				args = append(args, "--dry-run")
			}
			// The database's change comes first: it is not written either.
			r := e.runStdin(dbChanged+"---\n"+edited, args...)
			requireOneErrorLine(t, r, c.field)
			assert.Equal(t, 2, r.code, "%s", r)
			assert.Contains(t, r.stderr, "nothing was applied", "%s", r)
			if c.bundleMsg {
				assert.Contains(t, r.stderr, "change it through its bundle", "%s", r)
			}
			assert.Equal(t, before, e.ok(append(c.get, "-o", "yaml")...).stdout, "%v: written", c.get)
			assert.Equal(t, db, e.ok("get", "Database", "orders", "-n", "shop", "-o", "yaml").stdout, "the database beside it was written")
		}
	}
	// A Backup that does not exist is not created: register it instead.
	r := e.runStdin("kind: Backup\nmetadata: {name: nope}\nspec: {}\n", "apply", "-f", "-")
	requireOneErrorLine(t, r, "register one with 'lethe backup create'")
	assert.Equal(t, 1, r.code, "%s", r)
}

// TestOutputNameWideAndJSONPath: -o name prints kind/name as kubectl
// does, -o wide adds columns, -o jsonpath runs a kubectl template, and a
// template that does not parse is bad input.
func TestOutputNameWideAndJSONPath(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("shop.yaml", schemaShop))
	assert.Equal(t, "database/orders\n", e.ok("get", "Database", "-o", "name").stdout)
	assert.Equal(t, "service/web\n", e.ok("get", "service", "web", "-n", "shop", "-o", "name").stdout)
	assert.Equal(t, "orders 10\n", e.ok("get", "Database", "-o", "jsonpath={.items[0].metadata.name} {.items[0].spec.size}").stdout)
	assert.Equal(t, "Active\n", e.ok("get", "Database", "orders", "-n", "shop", "-o", "jsonpath={.lifecycle.phase}").stdout)
	wide := e.ok("get", "Database", "-o", "wide").stdout
	assert.Contains(t, strings.SplitN(wide, "\n", 2)[0], "UID")
	assert.Contains(t, wide, "team=db")
	assert.NotContains(t, strings.SplitN(e.ok("get", "Database").stdout, "\n", 2)[0], "UID")
	e.create("b1", 1, "--label", "team=db")
	assert.Contains(t, e.ok("backup", "list", "-o", "wide").stdout, "team=db")
	assert.NotContains(t, e.ok("backup", "list").stdout, "team=db")
	assert.Equal(t, "backup/b1\n", e.ok("backup", "list", "-o", "name").stdout)
	for _, bad := range []string{"jsonpath={.items[", "jsonpath=", "xml"} {
		r := e.run("get", "Database", "-o", bad)
		assert.Equal(t, 2, r.code, "%s", r)
		requireOneErrorLine(t, r, "--output")
	}
	// A field the object does not have is bad input too (kubectl: error).
	r := e.run("get", "Database", "orders", "-n", "shop", "-o", "jsonpath={.nope}")
	assert.Equal(t, 2, r.code, "%s", r)
}

// TestKindsResolveAsKubectlResolvesThem: any case, singular or plural,
// Lethe's short names; a kind the catalog has never held exits 4 with
// the nearest name.
func TestKindsResolveAsKubectlResolvesThem(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("shop.yaml", schemaShop))
	e.create("b1", 2)
	for _, typed := range []string{"Database", "database", "databases", "DATABASES", "Databases"} {
		assert.Contains(t, e.ok("get", typed).stdout, "orders", typed)
	}
	for _, typed := range []string{"Cache", "caches", "CACHE"} {
		assert.Contains(t, e.ok("get", typed, "-n", "shop").stdout, "cache", typed)
	}
	for _, typed := range []string{"backup", "backups", "bk", "Backup", "BACKUPS"} {
		assert.Contains(t, e.ok("get", typed).stdout, "b1", typed)
	}
	for _, typed := range []string{"bundle", "bundles", "Bundle"} {
		assert.Contains(t, e.ok("get", typed).stdout, "front", typed)
	}
	e.ok("describe", "databases", "orders", "-n", "shop")
	e.ok("explain", "services", "web", "-n", "shop")
	for _, c := range []struct{ typed, suggest string }{
		{"backpus", "did you mean backups?"},
		{"Databse", "did you mean Database?"},
		{"servces", "did you mean services?"},
		{"svc", ""},
	} {
		for _, args := range [][]string{{"get", c.typed}, {"get", c.typed, "x"}, {"describe", c.typed, "x"}, {"delete", c.typed, "x", "--yes"}, {"explain", c.typed, "x"}} {
			r := e.run(args...)
			assert.Equal(t, 4, r.code, "%s", r)
			requireOneErrorLine(t, r, "the catalog has never held a resource of kind "+c.typed)
			assert.Contains(t, r.stderr, c.suggest)
		}
	}
}
