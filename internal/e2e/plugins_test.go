package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// exitPlugins is `lethe`'s exit code for a refusal because plugins are
// missing (README, "Exit codes").
const exitPlugins = 5

// expectedJSON is the part of `backup get -o json` about plugins.
type expectedJSON struct {
	Spec struct {
		StorageLocation string `json:"storageLocation"`
		ExpectedPlugins map[string]struct {
			Items   int64    `json:"items"`
			Samples []string `json:"samples"`
		} `json:"expectedPlugins"`
	} `json:"spec"`
	Lifecycle struct {
		PluginMissing string `json:"pluginMissing"`
		Conditions    []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
	} `json:"lifecycle"`
}

func (e *env) expected(name string) expectedJSON {
	e.t.Helper()
	r := e.ok("backup", "get", name, "-o", "json")
	var v expectedJSON
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &v), "%s", r)
	return v
}

// uninstall removes a plugin binary from the plugin folder.
func (e *env) uninstall(p string) {
	e.t.Helper()
	require.NoError(e.t, os.Remove(filepath.Join(e.pluginDir(), p)))
}

// TestDeleteRefusesWithoutItsPlugins is issue 8 point 1: the backup
// records its expected plugins at create; where one is missing, delete
// refuses with one line naming it and exit 4, and nothing changes; a
// plugin gone for good is skipped with --skip-plugin, which needs
// --abandon (and --yes without a terminal), and the audit records the
// items it would have received.
func TestDeleteRefusesWithoutItsPlugins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder, pluginNoop)
	e.create("nightly", 12)
	exp := e.expected("nightly")
	require.Equal(t, "file://"+e.storageDir(), exp.Spec.StorageLocation)
	require.EqualValues(t, 12, exp.Spec.ExpectedPlugins["lethe.io/noop"].Items)
	require.EqualValues(t, 12, exp.Spec.ExpectedPlugins[recFirst].Items)
	require.Contains(t, e.ok("backup", "get", "nightly").stdout, "Plugins:    expected lethe.io/noop (12 items)")

	e.uninstall(pluginNoop)
	listBefore := e.ok("backup", "list", "-o", "json").stdout
	storeBefore := treeDigest(t, e.storageDir())
	auditBefore := e.ok("audit", "--name", "nightly", "-o", "json").stdout
	for _, args := range [][]string{
		{"backup", "delete", "nightly", "--yes"},
		{"backup", "delete", "nightly", "--yes", "--force"},
		{"backup", "delete", "nightly", "--yes", "--abandon"},
		{"backup", "delete", "nightly", "--yes", "--no-plugins"},
	} {
		r := e.run(args...)
		require.Equal(t, exitPlugins, r.code, "%s", r)
		requireOneErrorLine(t, r, "backup nightly: refusing to delete: expected plugins not installed or not starting: lethe.io/noop (12 items)")
		require.Equal(t, listBefore, e.ok("backup", "list", "-o", "json").stdout, "%s changed the catalog", r.args)
		require.Equal(t, storeBefore, treeDigest(t, e.storageDir()), "%s changed the storage", r.args)
		require.Equal(t, auditBefore, e.ok("audit", "--name", "nightly", "-o", "json").stdout, "%s wrote an audit entry", r.args)
		require.Zero(t, fileSize(e.record), "%s ran a plugin", r.args)
	}
	for _, c := range []struct {
		args     []string
		contains string
	}{
		{[]string{"backup", "delete", "nightly", "--yes", "--skip-plugin", "noop"}, "needs --abandon"},
		{[]string{"backup", "delete", "nightly", "--skip-plugin", "noop", "--abandon"}, "needs --yes"},
		{[]string{"backup", "delete", "nightly", "--yes", "--abandon", "--skip-plugin", recFirst}, "is installed"},
		{[]string{"backup", "delete", "nightly", "--yes", "--abandon", "--skip-plugin", "example.com/x"}, "does not expect"},
	} {
		r := e.run(c.args...)
		require.Equal(t, 2, r.code, "%s", r)
		requireOneErrorLine(t, r, c.contains)
		require.Equal(t, listBefore, e.ok("backup", "list", "-o", "json").stdout, "%s changed the catalog", r.args)
	}

	r := e.ok("backup", "delete", "nightly", "--yes", "--abandon", "--skip-plugin", "noop")
	require.Contains(t, r.stdout, "backup nightly deleted, ABANDONING: the items of the skipped plugins are abandoned")
	require.Contains(t, r.stdout, "abandoned 12 items at skipped plugin lethe.io/noop")
	e.requirePurged("nightly")
	require.Len(t, e.readRecord()[recFirst], 12, "the installed plugins ran")
	r = e.ok("audit", "--name", "nightly", "-o", "json")
	require.Contains(t, r.stdout, `"action": "force-purge"`)
	require.Contains(t, r.stdout, `"skippedPlugins"`)
	require.Contains(t, r.stdout, `"items": 12`)
	require.Contains(t, r.stdout, "/ns-0/")
}

// TestNoPluginsMustBeSaid: with an empty plugin folder, delete and server
// refuse (exit 4) unless --no-plugins; that choice is audited.
func TestNoPluginsMustBeSaid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.ok("backup", "create", "bare", "--from", e.writeTarball("bare", 4))
	require.Contains(t, r.stderr, "no plugins are installed")
	r = e.run("backup", "delete", "bare", "--yes")
	require.Equal(t, exitPlugins, r.code, "%s", r)
	requireOneErrorLine(t, r, "--no-plugins")
	require.Equal(t, "Active", e.get("bare").Phase)

	r = e.run("server")
	require.Equal(t, exitPlugins, r.code, "%s", r)
	requireOneErrorLine(t, r, "plugin folder "+e.pluginDir()+" is empty")

	r = e.ok("backup", "delete", "bare", "--yes", "--no-plugins")
	require.Contains(t, r.stdout, "backup bare deleted")
	e.requirePurged("bare")
	r = e.ok("audit", "--name", "bare", "-o", "json")
	require.Contains(t, r.stdout, "--no-plugins")
	require.Contains(t, r.stdout, `"noPlugins": true`)
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestServerKeepsABackupWhosePluginIsMissing: the daemon never purges a
// backup whose expected plugin is missing; the deletion stays, with the
// condition PluginMissing naming the plugin in get and list, and a metric.
func TestServerKeepsABackupWhosePluginIsMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder, pluginNoop)
	e.create("kept", 6)
	e.create("other", 3)
	e.uninstall(pluginNoop)
	// Both queued for the daemon: --async does not run plugins here.
	e.ok("backup", "delete", "kept", "--yes", "--async")

	metrics := freePort(t)
	e.ok("plugin", "lock") // lethe server runs pinned plugins only
	p := e.start("server", "--metrics-addr", metrics)
	deadline := time.Now().Add(60 * time.Second)
	var exp expectedJSON
	for time.Now().Before(deadline) {
		if p.exited() {
			t.Fatalf("server exited: %s", p.wait(t))
		}
		exp = e.expected("kept")
		if exp.Lifecycle.PluginMissing != "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Contains(t, exp.Lifecycle.PluginMissing, "lethe.io/noop (6 items)", "%+v", exp)
	var cond string
	for _, c := range exp.Lifecycle.Conditions {
		if c.Type == "PluginMissing" {
			cond = c.Status + " " + c.Message
		}
	}
	require.Contains(t, cond, "True ")
	require.Contains(t, cond, "lethe.io/noop")
	require.Contains(t, e.ok("backup", "get", "kept").stdout, "Condition:  PluginMissing=True PluginMissing backup kept: refusing to delete")
	list := e.ok("backup", "list").stdout
	require.Regexp(t, `kept\s+Deleting.* PluginMissing`, list)
	require.Equal(t, 1, strings.Count(list, "PluginMissing"), "the condition is said once\n%s", list)

	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		// The server's stderr is safe to read only once it has exited.
		_ = p.cmd.Process.Kill()
		t.Fatalf("metrics: %v\n%s", err, p.wait(t))
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), "lethe_backups_plugin_missing 1")
	require.Contains(t, string(body), `lethe_backup_deletions_total{result="plugin-missing"}`)

	// Still there, unpurged, with its tarball; no plugin ran for it.
	require.Equal(t, "Deleting", e.get("kept").Phase)
	require.FileExists(t, e.tarballPath("kept"))
	require.Zero(t, fileSize(e.record))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := p.wait(t)
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, "Deleting", e.get("kept").Phase)
	require.True(t, strings.Contains(r.stderr, "plugins missing"), "the server logs the refusal\n%s", r)
}

// TestPluginsAddedAfterRegistration is issue 24 point 7, through the
// binary: plugins installed after a backup was registered are named in a
// warning by the dry run and by the delete; once such a plugin failed an
// item and was removed, --skip-plugin NAME --abandon skips that item
// (shown in the dry run, audited), and a name with nothing to skip is one
// line, exit 2, nothing changed.
func TestPluginsAddedAfterRegistration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginNoop)
	e.create("nightly", 12)
	copyFile(t, filepath.Join(bin, pluginRecorder), filepath.Join(e.pluginDir(), pluginRecorder), 0o750)
	bad := archivetest.SpecN(5, 200)
	require.NoError(t, os.WriteFile(filepath.Join(e.control, bad.Name+".fail"), nil, 0o600))

	r := e.ok("backup", "delete", "nightly", "--dry-run")
	require.Contains(t, r.stdout, "WARNING:   plugin "+recFirst+" was not installed when backup nightly was registered (it is not among its expected plugins), and would receive 12 of its items")
	require.NotContains(t, r.stdout, "plugin lethe.io/noop was not installed")
	r = e.run("backup", "delete", "nightly", "--yes")
	require.Equal(t, 3, r.code, "%s", r)
	require.Contains(t, r.stderr, "Warning: plugin "+recFirst+" was not installed when backup nightly was registered")

	e.uninstall(pluginRecorder)
	listBefore := e.ok("backup", "list", "-o", "json").stdout
	for _, c := range []struct {
		args     []string
		contains string
	}{
		{[]string{"backup", "delete", "nightly", "--yes", "--skip-plugin", recFirst}, "needs --abandon"},
		{[]string{"backup", "delete", "nightly", "--yes", "--abandon", "--skip-plugin", "test.lethe.io/b-second"}, "none of its items is failed or blocked at it"},
	} {
		r := e.run(c.args...)
		require.Equal(t, 2, r.code, "%s", r)
		requireOneErrorLine(t, r, c.contains)
		require.Equal(t, listBefore, e.ok("backup", "list", "-o", "json").stdout, "%s changed the catalog", r.args)
	}
	r = e.ok("backup", "delete", "nightly", "--dry-run", "--abandon", "--skip-plugin", recFirst)
	require.Contains(t, r.stdout, "SKIPPED:   plugin "+recFirst+" (--skip-plugin): items it would receive, abandoned: 1, e.g. "+bad.Key())
	r = e.ok("backup", "delete", "nightly", "--yes", "--abandon", "--skip-plugin", recFirst)
	require.Contains(t, r.stdout, "abandoned 1 item at skipped plugin "+recFirst)
	e.requirePurged("nightly")
	r = e.ok("audit", "--name", "nightly", "-o", "json")
	require.Contains(t, r.stdout, `"skippedPlugins"`)
	require.Contains(t, r.stdout, bad.Key())
}
