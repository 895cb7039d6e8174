package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGetWithoutNamespaceSaysWhichNamespacesHoldTheName: get (and
// describe) of a name without -n that exists only in namespaces still
// exits 4, and the one line says where it exists and how to name it.
func TestGetWithoutNamespaceSaysWhichNamespacesHoldTheName(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("dbs.yaml", "kind: Database\nmetadata: {name: orders, namespace: shop}\n---\nkind: Database\nmetadata: {name: users, namespace: shop}\n---\nkind: Database\nmetadata: {name: users, namespace: prod}\n"))
	for _, cmd := range []string{"get", "describe"} {
		r := e.run(cmd, "database", "orders")
		requireOneErrorLine(t, r, `Database "orders" not found; it exists in namespace shop: use -n shop`)
		assert.Equal(t, 4, r.code, "%s", r)
		r = e.run(cmd, "database", "users")
		requireOneErrorLine(t, r, `Database "users" not found; it exists in namespaces prod, shop: use -n NAMESPACE`)
		assert.Equal(t, 4, r.code, "%s", r)
	}
	// A name no namespace holds, or a wrong namespace, gets no hint.
	for _, args := range [][]string{{"get", "database", "nope"}, {"get", "database", "orders", "-n", "prod"}} {
		r := e.run(args...)
		require.Equal(t, 4, r.code, "%s", r)
		assert.NotContains(t, r.stderr, "exists in", "%s", r)
	}
}

// TestGetAllNamespacesShowLabelsAndSortByAsKubectl: -A lists every
// namespace and is refused with -n or NAME; --show-labels adds one
// LABELS column (once with -o wide); --sort-by sorts by a JSONPath over
// each object, numbers by value, in every output; a --sort-by that does
// not parse is bad input.
func TestGetAllNamespacesShowLabelsAndSortByAsKubectl(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.writeFile("dbs.yaml", `kind: Database
metadata: {name: b-mid, namespace: shop, labels: {team: db}}
spec: {size: 20}
---
kind: Database
metadata: {name: a-big, namespace: prod}
spec: {size: 100}
---
kind: Database
metadata: {name: c-small, namespace: shop}
spec: {size: 3}
`))
	all := e.ok("get", "databases", "-A").stdout
	assert.Equal(t, e.ok("get", "databases").stdout, all)
	assert.Contains(t, all, "prod")
	assert.Contains(t, all, "shop")
	for _, args := range [][]string{{"get", "databases", "-A", "-n", "shop"}, {"get", "database", "b-mid", "-A"}} {
		r := e.run(args...)
		requireOneErrorLine(t, r, "-A/--all-namespaces")
		assert.Equal(t, 2, r.code, "%s", r)
	}

	labels := e.ok("get", "databases", "--show-labels").stdout
	lines := strings.Split(strings.TrimSpace(labels), "\n")
	require.Regexp(t, `^NAMESPACE\s+NAME\s+PHASE\s+OWNERS\s+FINALIZERS\s+AGE\s+LABELS$`, lines[0])
	assert.Regexp(t, `(?m)^shop\s+b-mid\s.*\steam=db$`, labels)
	assert.Regexp(t, `(?m)^prod\s+a-big\s.*\s-$`, labels)
	wide := e.ok("get", "databases", "-o", "wide", "--show-labels").stdout
	assert.Equal(t, 1, strings.Count(strings.SplitN(wide, "\n", 2)[0], "LABELS"), wide)
	assert.NotContains(t, e.ok("get", "databases").stdout, "LABELS")

	names := func(out string) []string {
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			got = append(got, strings.Fields(l)[1])
		}
		return got
	}
	assert.Equal(t, []string{"c-small", "b-mid", "a-big"}, names(e.ok("get", "databases", "--sort-by=.spec.size").stdout), "numbers by value")
	assert.Equal(t, []string{"c-small", "b-mid", "a-big"}, names(e.ok("get", "databases", "--sort-by", "{.spec.size}").stdout))
	assert.Equal(t, []string{"a-big", "b-mid", "c-small"}, names(e.ok("get", "databases", "-A", "--sort-by", "metadata.name").stdout))
	assert.Equal(t, "database/c-small\ndatabase/b-mid\ndatabase/a-big\n", e.ok("get", "databases", "--sort-by=.spec.size", "-o", "name").stdout)
	assert.Equal(t, "c-small b-mid a-big\n", e.ok("get", "databases", "--sort-by=.spec.size", "-o", "jsonpath={.items[*].metadata.name}").stdout)
	// A field only some objects have: those without it come first.
	assert.Equal(t, []string{"a-big", "c-small", "b-mid"}, names(e.ok("get", "databases", "--sort-by=.metadata.labels.team").stdout))
	r := e.run("get", "databases", "--sort-by", "{.spec[")
	requireOneErrorLine(t, r, "--sort-by")
	assert.Equal(t, 2, r.code, "%s", r)
}
