package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestBadInput is DESIGN §7.3: garbage gets one clear error line and a
// non-zero exit code, and changes nothing: not the catalog, not the
// storage, and no plugin runs.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	e.create("good", 10)
	e.create("later", 10, "--deletion-delay", "1h")
	e.ok("backup", "delete", "later", "--yes")
	good := e.writeTarball("fresh", 10)
	hostile := e.writeHostile("hostile")
	truncated := filepath.Join(e.dir, "truncated.tar.gz")
	b, err := os.ReadFile(good)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(truncated, b[:len(b)/2], 0o600))
	notGzip := filepath.Join(e.dir, "notgzip.tar.gz")
	require.NoError(t, os.WriteFile(notGzip, []byte("this is not a tarball\n"), 0o600))

	cases := []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"bakup", "list"}, 2, `unknown command "bakup" for "lethe" Did you mean this? backup`},
		{[]string{"backup", "list", "--bogus-flag"}, 2, "unknown flag: --bogus-flag"},
		{[]string{"backup", "create", "Bad_Name", "--from", good}, 2, `invalid backup name "Bad_Name"`},
		{[]string{"backup", "create", "../etc", "--from", good}, 2, "invalid backup name"},
		{[]string{"backup", "create", "fresh"}, 2, "--from"},
		{[]string{"backup", "create"}, 2, "NAME"},
		{[]string{"backup", "create", "fresh", "--from", good, "--ttl", "3 parsecs"}, 2, "--ttl"},
		{[]string{"backup", "create", "fresh", "--from", good, "--ttl", "-5h"}, 2, "--ttl"},
		{[]string{"backup", "create", "fresh", "--from", good, "--deletion-delay", "soon"}, 2, "--deletion-delay"},
		{[]string{"backup", "create", "fresh", "--from", good, "--labels", "novalue"}, 2, "--labels"},
		{[]string{"backup", "create", "fresh", "--from", hostile}, 1, "evil.json"},
		{[]string{"backup", "create", "fresh", "--from", truncated}, 1, "rejected"},
		{[]string{"backup", "create", "fresh", "--from", notGzip}, 1, "rejected"},
		{[]string{"backup", "create", "fresh", "--from", filepath.Join(e.dir, "missing.tar.gz")}, 1, "missing.tar.gz"},
		{[]string{"backup", "create", "fresh", "--from", e.dir}, 1, "folder"},
		{[]string{"backup", "create", "good", "--from", good}, 1, `backup "good" already exists`},
		{[]string{"backup", "list", "-o", "xml"}, 2, `--output "xml"`},
		{[]string{"backup", "get", "good", "-o", "xml"}, 2, `--output "xml"`},
		{[]string{"plugin", "list", "-o", "xml"}, 2, `"xml"`},
		{[]string{"backup", "delete", "good", "--dry-run", "-o", "xml"}, 2, `--output "xml"`},
		{[]string{"backup", "get", "nope"}, 4, `backup "nope" not found`},
		{[]string{"backup", "delete", "nope", "--yes"}, 4, `backup "nope" not found`},
		{[]string{"backup", "delete", "nope", "--dry-run"}, 4, `backup "nope" not found`},
		{[]string{"backup", "undelete", "nope"}, 4, `backup "nope" not found`},
		{[]string{"backup", "undelete", "good"}, 2, "no deletion scheduled"},
		{[]string{"backup", "delete", "good"}, 2, "pass --yes"},
		{[]string{"backup", "delete", "good", "--yes", "--deletion-delay", "soon"}, 2, "--deletion-delay"},
		// Several names (issue 14): all are resolved before anything changes.
		{[]string{"backup", "delete", "good", "bad", "--yes"}, 4, `backup "bad" not found`},
		{[]string{"backup", "delete", "--yes"}, 2, "NAME..., -l/--selector SELECTOR or --all"},
		{[]string{"backup", "delete", "good", "--all", "--yes"}, 2, "cannot be combined"},
		{[]string{"--log-level", "loud", "backup", "list"}, 2, "--log-level"},
		// Issue 26's awkward lines: each says the rule it breaks.
		{[]string{"server", "--workers", "abc"}, 2, `invalid argument "abc" for "--workers" flag: want a whole number`},
		{[]string{"server", "--workers", "100000"}, 2, "--workers must be between 1 and 256, got 100000"},
		{[]string{"backup", "create", strings.Repeat("a", 300), "--from", good}, 2, "invalid backup name (300 characters): a name has at most 253"},
	}
	listBefore := e.ok("backup", "list", "-o", "json").stdout
	storeBefore := treeDigest(t, e.storageDir())
	for _, c := range cases {
		r := e.run(c.args...)
		require.Equal(t, c.code, r.code, "%s", r)
		requireOneErrorLine(t, r, c.contains)
		require.Equal(t, listBefore, e.ok("backup", "list", "-o", "json").stdout, "%s changed the catalog", r.args)
		require.Equal(t, storeBefore, treeDigest(t, e.storageDir()), "%s changed the storage", r.args)
		require.Zero(t, fileSize(e.record), "%s ran a plugin", r.args)
	}
}

// TestUnknownSubcommand: an unknown subcommand of a command group is bad
// input like any other (DESIGN §7.3).
// (They used to print the group's help and exit 0.)
func TestUnknownSubcommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, group := range []string{"backup", "plugin"} {
		r := e.run(group, "frobnicate")
		require.Equal(t, 2, r.code, "%s", r)
		requireOneErrorLine(t, r, "frobnicate")
	}
}

// withoutLogLines drops hclog lines ("<time> [WARN]  …") from stderr.
func withoutLogLines(r result) result {
	var keep []string
	for _, l := range strings.SplitAfter(r.stderr, "\n") {
		if !hclogLine.MatchString(l) {
			keep = append(keep, l)
		}
	}
	r.stderr = strings.Join(keep, "")
	return r
}

var hclogLine = regexp.MustCompile(`^\S+ \[(TRACE|DEBUG|INFO|WARN|ERROR)\] `)

// TestOutputFormats: -o json and -o yaml of backup list, backup get and
// plugin list parse, agree with each other and hold the expected fields.
func TestOutputFormats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder, pluginNoop)
	e.create("alpha", 7, "--ttl", "720h", "--labels", "team=db")
	e.create("beta", 14, "--deletion-delay", "24h")

	both := func(v any, args ...string) {
		t.Helper()
		js := e.ok(append(args, "-o", "json")...)
		require.NoError(t, json.Unmarshal([]byte(js.stdout), v), "%s", js)
		ym := e.ok(append(args, "-o", "yaml")...)
		fromYAML, err := yaml.YAMLToJSON([]byte(ym.stdout))
		require.NoError(t, err, "%s", ym)
		var a, b any
		require.NoError(t, json.Unmarshal([]byte(js.stdout), &a))
		require.NoError(t, json.Unmarshal(fromYAML, &b))
		require.Equal(t, a, b, "json and yaml disagree for %v", args)
	}

	var l struct{ Items []backupJSON }
	both(&l, "backup", "list")
	list := l.Items
	require.Len(t, list, 2)
	byName := map[string]backupJSON{}
	for _, b := range list {
		byName[b.Name] = b
	}
	a := byName["alpha"]
	require.Equal(t, "Active", a.Phase)
	require.NotEmpty(t, a.UID)
	require.Equal(t, map[string]string{"team": "db"}, a.Labels)
	require.EqualValues(t, 7, a.Spec.Items)
	require.Equal(t, "backups/alpha/alpha.tar.gz", a.Spec.StorageKey)
	require.Regexp(t, `^[0-9a-f]{64}$`, a.Spec.Digest)
	require.Positive(t, a.Spec.Size)
	require.NotNil(t, a.Spec.ExpiresAt)
	require.False(t, a.CreatedAt.IsZero())
	require.Equal(t, "24h", byName["beta"].Annotations["lethe.io/deletion-delay"])

	var one backupJSON
	both(&one, "backup", "get", "beta")
	require.Equal(t, "beta", one.Name)
	require.EqualValues(t, 14, one.Spec.Items)

	e.ok("backup", "delete", "beta", "--yes")
	both(&one, "backup", "get", "beta")
	require.Equal(t, "Scheduled", one.Phase)
	require.NotNil(t, one.DueAt)

	var plugins struct {
		Kind  string `json:"kind"`
		Items []struct {
			Name            string `json:"name"`
			Binary          string `json:"binary"`
			ProtocolVersion int    `json:"protocolVersion"`
			Version         string `json:"version"`
			Selector        string `json:"selector"`
		} `json:"items"`
	}
	both(&plugins, "plugin", "list")
	require.Equal(t, "PluginList", plugins.Kind)
	var got []string
	for _, p := range plugins.Items {
		got = append(got, p.Name)
		require.NotEmpty(t, p.Version, p.Name)
		require.Positive(t, p.ProtocolVersion, p.Name)
		require.NotEmpty(t, p.Selector, p.Name)
		require.Equal(t, e.pluginDir(), filepath.Dir(p.Binary), p.Name)
	}
	require.Equal(t, []string{"lethe.io/noop", recFirst, recSecond, recPods}, got, "plugins in run order")

	// An empty catalog lists as an empty list, items [] and not null.
	empty := newEnv(t)
	r := empty.ok("backup", "list", "-o", "json")
	require.JSONEq(t, `{"apiVersion": "lethe.io/v1", "kind": "BackupList", "items": []}`, r.stdout)
}

// planJSON is `backup delete --dry-run -o json`.
type planJSON struct {
	Backup     string `json:"backup"`
	Phase      string `json:"phase"`
	Rejected   string `json:"rejected"`
	TotalItems int64  `json:"totalItems"`
	Plugins    []struct {
		Plugin   string   `json:"plugin"`
		Selector string   `json:"selector"`
		Items    int64    `json:"items"`
		Samples  []string `json:"samples"`
	} `json:"plugins"`
	Unmatched int64    `json:"unmatched"`
	Purge     []string `json:"purge"`
}

// TestDryRun is issue 5 point 10: the plan per plugin (count and samples),
// what is purged, and what would be rejected; and it changes nothing.
func TestDryRun(t *testing.T) {
	t.Parallel()
	const n = 70
	e := newEnv(t, pluginRecorder)
	e.create("plan", n)
	e.create("spoiled", 5)

	listBefore := e.ok("backup", "list", "-o", "json").stdout
	storeBefore := treeDigest(t, e.storageDir())
	r := e.ok("backup", "delete", "plan", "--dry-run", "-o", "json")
	var p planJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p), "%s", r)
	require.Equal(t, "plan", p.Backup)
	require.Equal(t, "Active", p.Phase)
	require.Empty(t, p.Rejected)
	require.EqualValues(t, n, p.TotalItems)
	require.Zero(t, p.Unmatched)
	want := map[string]int64{recFirst: n, recSecond: n, recPods: n / 7}
	require.Len(t, p.Plugins, 3)
	for i, pp := range p.Plugins {
		require.Equal(t, []string{recFirst, recSecond, recPods}[i], pp.Plugin, "plugins in run order")
		require.Equal(t, want[pp.Plugin], pp.Items, pp.Plugin)
		require.NotEmpty(t, pp.Samples, pp.Plugin)
		require.LessOrEqual(t, len(pp.Samples), 3)
		for _, s := range pp.Samples {
			require.Regexp(t, `^[a-z.]+/(ns-\d/)?[a-z]+-\d+$|^[a-z.]+//[a-z]+-\d+$`, s)
			if pp.Plugin == recPods {
				require.True(t, strings.HasPrefix(s, "pods/"), s)
			}
		}
	}
	require.Len(t, p.Purge, 2)
	require.Contains(t, p.Purge[0], e.tarballPath("plan"))
	require.Contains(t, p.Purge[1], "Backup/plan")
	yml := e.ok("backup", "delete", "plan", "--dry-run", "-o", "yaml")
	var py planJSON
	require.NoError(t, yaml.Unmarshal([]byte(yml.stdout), &py), "%s", yml)
	require.Equal(t, p, py)
	table := e.ok("backup", "delete", "plan", "--dry-run")
	require.Contains(t, table.stdout, "dry run: nothing changes")
	require.Regexp(t, regexp.QuoteMeta(recPods)+`\s+`+strconv.Itoa(n/7)+` items`, table.stdout)

	// The tarball of "spoiled" is swapped for a hostile one in storage:
	// the plan says it would be rejected, and a real delete stops before
	// any plugin runs, changing nothing.
	require.Equal(t, listBefore, e.ok("backup", "list", "-o", "json").stdout, "a dry run changed the catalog")
	require.Equal(t, storeBefore, treeDigest(t, e.storageDir()), "a dry run changed the storage")
	copyFile(t, e.writeHostile("spoiled-evil"), e.tarballPath("spoiled"), 0o640)
	listBefore = e.ok("backup", "list", "-o", "json").stdout
	storeBefore2 := treeDigest(t, e.storageDir())
	r = e.ok("backup", "delete", "spoiled", "--dry-run", "-o", "json")
	var ps planJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ps), "%s", r)
	require.Contains(t, ps.Rejected, "tarball replaced", "the plan says the tarball is not the one registered")
	require.Equal(t, listBefore, e.ok("backup", "list", "-o", "json").stdout, "a dry run changed the catalog")
	r = e.run("backup", "delete", "spoiled", "--yes")
	require.Equal(t, 1, r.code, "%s", r)
	// The deleter logs a warning that the tarball was replaced before the
	// error; the error itself is one line.
	requireOneErrorLine(t, withoutLogLines(r), "tarball replaced")
	require.Equal(t, "Active", e.get("spoiled").Phase)
	// The only change: the condition that get and list show.
	require.Contains(t, e.ok("backup", "list").stdout, "Active TarballReplaced")
	require.Equal(t, storeBefore2, treeDigest(t, e.storageDir()))
	delete(storeBefore, filepath.Join("backups", "spoiled", "spoiled.tar.gz"))
	delete(storeBefore2, filepath.Join("backups", "spoiled", "spoiled.tar.gz"))
	require.Equal(t, storeBefore, storeBefore2)
	require.Zero(t, fileSize(e.record), "a dry run or a rejected delete ran a plugin")
}

var progressLine = regexp.MustCompile(`^progress: (\d+)/(\d+) items \(\d+ items/s\)$`)

// TestProgressLines is issue 5 point 9: off a terminal, a deletion prints
// plain "progress:" lines, never a bar's escape codes or carriage returns.
func TestProgressLines(t *testing.T) {
	t.Parallel()
	// The gate plugin takes one item at a time and sleeps 1ms per item, so
	// the deletion lasts well over the CLI's 2s between progress lines.
	const n = 2500
	e := newEnv(t, pluginGate)
	e.extra = append(e.extra, "LETHE_GATE_SLEEP=1ms")
	e.create("slow", n)
	r := e.ok("backup", "delete", "slow", "--yes")
	require.Contains(t, r.stdout, "backup slow deleted: 2500 items")
	require.NotContains(t, r.stderr, "\x1b", "escape codes on a non-terminal")
	require.NotContains(t, r.stderr, "\r", "carriage returns on a non-terminal")
	require.NotContains(t, r.stdout, "\x1b")
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	var last int64
	for _, l := range lines {
		m := progressLine.FindStringSubmatch(l)
		require.NotNil(t, m, "unexpected stderr line %q", l)
		done, _ := strconv.ParseInt(m[1], 10, 64)
		total, _ := strconv.ParseInt(m[2], 10, 64)
		require.EqualValues(t, n, total)
		require.GreaterOrEqual(t, done, last)
		require.LessOrEqual(t, done, total)
		last = done
	}
	require.NotEmpty(t, r.stderr, "a deletion of over 2.5s printed no progress line")
}
