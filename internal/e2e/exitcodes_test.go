package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestExitCodesFollowTheReadmeTable: one exit-code table (the README's)
// and one flag grammar for every command. Invalid input is 2 for every
// kind; a missing and a purged resource are 4, said as get says them; a
// kind the catalog never held is 4; -l/--selector always selects and a
// bad one is 2; --labels sets labels; --version and version report the
// version, and -v is not taken.
func TestExitCodesFollowTheReadmeTable(t *testing.T) {
	e := newEnv(t, pluginNoop)
	e.ok("apply", "-f", e.writeFile("shop.yaml", schemaShop))
	e.create("b1", 2, "--labels", "team=db,env=prod")
	e.create("gone", 2)
	e.ok("backup", "delete", "gone", "--yes")
	e.ok("apply", "-f", e.writeFile("old.yaml", "kind: Account\nmetadata: {name: old}\n"))
	e.ok("delete", "Account", "old", "--yes", "--wait")
	missing := e.writeFile("missing.yaml", "kind: Database\nmetadata: {name: nope, namespace: shop}\n")
	long := strings.Repeat("a", 300)
	badName := e.writeFile("bad-name.yaml", "kind: Database\nmetadata: {name: Bad_Name, namespace: shop}\n")
	for _, c := range []struct {
		args []string
		code int
		says string // in the error line; "" for a success
	}{
		// 0
		{[]string{"--version"}, 0, ""},
		{[]string{"version"}, 0, ""},
		{[]string{"get", "backups", "-l", "env=prod,team=db"}, 0, ""},
		{[]string{"backup", "list", "-l", "team=db"}, 0, ""},
		{[]string{"backup", "get", "-l", "team=db"}, 0, ""},
		{[]string{"backup", "describe", "--selector", "team=db"}, 0, ""},
		{[]string{"describe", "databases", "-l", "team=db"}, 0, ""},
		{[]string{"audit", "--kind", "Service", "--name", "web", "-n", "shop"}, 0, ""},
		{[]string{"get", "bsl"}, 0, ""},
		// 2: invalid input, for every kind
		{[]string{"-v"}, 2, "unknown shorthand flag: 'v'"},
		{[]string{"completion", "tcsh"}, 2, "unknown shell"},
		{[]string{"get", "Database", "Bad_Name"}, 2, "invalid name"},
		{[]string{"get", "backup", "Bad_Name"}, 2, "invalid backup name"},
		{[]string{"describe", "Database", "Bad_Name"}, 2, "invalid name"},
		{[]string{"delete", "Database", "Bad_Name", "--yes"}, 2, "invalid name"},
		{[]string{"explain", "Database", "Bad_Name"}, 2, "invalid name"},
		{[]string{"finalize", "Database", "Bad_Name", "example.com/x"}, 2, "invalid name"},
		{[]string{"undelete", "Database", "Bad_Name"}, 2, "invalid name"},
		// 1, not 2: at apply (and delete -f) an invalid name is a refused
		// manifest, as every invalid field of one (docs/apply.md).
		{[]string{"apply", "-f", badName}, 1, `metadata.name: invalid name "Bad_Name"`},
		{[]string{"apply", "-f", badName, "--dry-run"}, 1, `metadata.name: invalid name "Bad_Name"`},
		{[]string{"delete", "-f", badName, "--yes"}, 1, `metadata.name: invalid name "Bad_Name"`},
		{[]string{"get", "Database", "orders", "-n", "Bad_NS"}, 2, "invalid namespace"},
		{[]string{"get", "Database", long}, 2, "invalid name (300 characters): a name has at most 253"},
		{[]string{"backup", "get", long}, 2, "invalid backup name (300 characters): a name has at most 253"},
		{[]string{"get", "backups", "-l", "team in ("}, 2, "--selector"},
		{[]string{"get", "Database", "-l", "a b"}, 2, "--selector"},
		{[]string{"backup", "list", "-l", "team in ("}, 2, "--selector"},
		{[]string{"backup", "get", "-l", "team in ("}, 2, "--selector"},
		{[]string{"describe", "databases", "-l", "team in ("}, 2, "--selector"},
		{[]string{"get", "backup", "b1", "-l", "team=none"}, 2, "a NAME and -l/--selector cannot be given together"},
		{[]string{"backup", "get", "b1", "-l", "team=none"}, 2, "a NAME and -l/--selector cannot be given together"},
		{[]string{"audit", "-n", "Bad_NS"}, 2, "invalid namespace"},
		{[]string{"backup", "delete", "-l", "team in (", "--yes"}, 2, "--selector"},
		{[]string{"backup", "create", "b2", "--from", "x.tgz", "-l", "team=db"}, 2, "unknown shorthand flag: 'l'"},
		{[]string{"backup", "create", "b2", "--from", "x.tgz", "--labels", "team"}, 2, "--labels"},
		{[]string{"get", "Database", "-o", "xml"}, 2, "--output"},
		{[]string{"undelete", "Database", "orders", "-n", "shop"}, 2, "has no deletion scheduled"},
		// 4: not found, purged, a kind never held, said the same way
		{[]string{"get", "Database", "nope", "-n", "shop"}, 4, `Database "shop/nope" not found`},
		{[]string{"describe", "Database", "nope", "-n", "shop"}, 4, `Database "shop/nope" not found`},
		{[]string{"finalize", "Database", "nope", "-n", "shop", "example.com/x"}, 4, `Database "shop/nope" not found`},
		{[]string{"undelete", "Database", "nope", "-n", "shop"}, 4, `Database "shop/nope" not found`},
		{[]string{"get", "backup", "gone"}, 4, `backup "gone" was purged`},
		{[]string{"backup", "get", "gone"}, 4, `backup "gone" was purged`},
		{[]string{"describe", "backup", "gone"}, 4, `backup "gone" was purged`},
		{[]string{"backup", "delete", "gone", "--yes"}, 4, `backup "gone" was purged`},
		{[]string{"backup", "undelete", "gone"}, 4, `backup "gone" was purged`},
		{[]string{"undelete", "backup", "gone"}, 4, `backup "gone" was purged`},
		{[]string{"finalize", "backup", "gone", "example.com/x"}, 4, `backup "gone" was purged`},
		{[]string{"get", "backpus"}, 4, "did you mean backups?"},
		{[]string{"get", "db"}, 4, "did you mean Database?"},
		{[]string{"delete", "services", "web", "--yes"}, 4, `Service "web" not found`},
		{[]string{"delete", "Database", "nope", "-n", "shop", "--yes"}, 4, `Database "shop/nope" not found`},
		{[]string{"delete", "-f", missing, "--yes"}, 4, `Database "shop/nope" not found`},
		{[]string{"explain", "Database", "nope", "-n", "shop"}, 4, `Database "shop/nope" not found`},
		{[]string{"delete", "Account", "old", "--yes"}, 4, `Account "old" was purged`},
		{[]string{"delete", "backup", "gone", "--yes"}, 4, `backup "gone" was purged`},
		{[]string{"delete", "svcs", "web", "--yes"}, 4, "the catalog has never held a resource of kind svcs"},
	} {
		r := e.run(c.args...)
		assert.Equal(t, c.code, r.code, "%s", r)
		if c.says != "" && r.code == c.code {
			requireOneErrorLine(t, r, c.says)
		}
	}
	assert.Equal(t, e.ok("--version").stdout, e.ok("version").stdout, "--version and lethe version print the same")
	assert.Equal(t, map[string]string{"team": "db", "env": "prod"}, e.get("b1").Labels, "--labels a=b,c=d sets two labels")
}
