package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// abandonFlag is the flag that takes the abandon path (deletion's
// ForcePurge) on a stuck deletion. On this branch it is --force; the
// --abandon rename replaces it there.
const abandonFlag = "--abandon"

// TestVanishedTarball: a backup whose tarball vanished after its deletion
// was requested shows TarballMissing in get and list; a delete is refused
// in one line; the dry run of the abandon path says one thing (no
// REJECTED); the abandon path purges it, and the report and the audit
// count every item never sent to a plugin.
func TestVanishedTarball(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	e.create("vanish", 12)
	// Requested for the daemon: Deleting, no item sent to a plugin yet.
	e.ok("backup", "delete", "vanish", "--yes", "--async")
	require.NoError(t, os.Remove(e.tarballPath("vanish")))

	r := e.run("backup", "delete", "vanish", "--yes")
	require.Equal(t, 1, r.code, "%s", r)
	requireOneErrorLine(t, withoutLogLines(r), "tarball missing")
	require.Contains(t, e.ok("backup", "get", "vanish").stdout, "Condition:  TarballMissing=True")
	var row string
	for _, l := range strings.Split(e.ok("backup", "list").stdout, "\n") {
		if strings.HasPrefix(l, "vanish ") {
			row = l
		}
	}
	require.Contains(t, row, "TarballMissing", "backup list shows the condition")
	require.Regexp(t, `vanish\s+Deleting TarballMissing`, e.ok("get", "backups").stdout)

	dry := e.ok("backup", "delete", "vanish", abandonFlag, "--dry-run")
	require.NotContains(t, dry.stdout, "REJECTED")
	require.NotContains(t, dry.stdout, "nothing would change")
	require.Contains(t, dry.stdout, "Tarball:   MISSING: ")
	require.Contains(t, dry.stdout, "ABANDON:   no plugin would run; the backup would be purged with 12 of its 12 items not settled "+
		"(0 failed or blocked, 12 never sent to a plugin), recorded in the audit log")
	require.Contains(t, dry.stdout, "Purged without running any plugin:")
	require.Equal(t, "Deleting", e.get("vanish").Phase, "a dry run changes nothing")

	r = e.ok("backup", "delete", "vanish", "--yes", abandonFlag)
	require.Contains(t, r.stdout, "backup vanish deleted, ABANDONING, without its plugins (its tarball was missing): "+
		"12 of 12 items not settled are abandoned (0 failed or blocked, 12 never sent to a plugin;")
	require.Contains(t, r.stdout, "purged no tarball (", "the tarball was gone already: nothing to purge in storage")
	e.requirePurged("vanish")
	audit := e.ok("audit", "--name", "vanish", "-o", "json").stdout
	require.Contains(t, audit, `"action": "force-purge"`)
	require.Contains(t, audit, `"abandoned": 12`)
	require.Contains(t, audit, `"neverSent": 12`)
	require.Zero(t, fileSize(e.record), "no plugin ran")
}

// TestReplacedTarball: a valid 1-item tarball put over a 3-item backup's
// file is refused before any plugin runs, in one line naming the recorded
// and the found digests; nothing changes.
func TestReplacedTarball(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	e.create("swapped", 3)
	recorded := e.get("swapped").Spec.Digest
	impostor := e.writeTarball("impostor", 1)
	b, err := os.ReadFile(impostor)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	found := hex.EncodeToString(sum[:])
	copyFile(t, impostor, e.tarballPath("swapped"), 0o600)

	for _, args := range [][]string{{"backup", "delete", "swapped", "--yes"}, {"backup", "delete", "swapped", "--yes", "--force"}} {
		r := e.run(args...)
		require.Equal(t, 1, r.code, "%s", r)
		requireOneErrorLine(t, withoutLogLines(r), "tarball replaced")
		require.Contains(t, r.stderr, "has sha256 "+found+", but sha256 "+recorded+" was recorded at registration")
	}
	require.Equal(t, "Active", e.get("swapped").Phase)
	require.Zero(t, fileSize(e.record), "no plugin ran")
	require.Contains(t, e.ok("backup", "get", "swapped").stdout, "Condition:  TarballReplaced=True")
}

// TestDeletionUsesTheRecordedStorage is issue 8 point 4: a backup created
// with one --storage is deleted from it whatever the default location is
// then, as long as it is a configured location (one that is not is
// refused: a catalog row alone never says where to delete); a recorded
// folder that is gone is one line naming it.
func TestDeletionUsesTheRecordedStorage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	a := filepath.Join(e.dir, "storage-a")
	bDir := filepath.Join(e.dir, "storage-b")
	tarA := filepath.Join(a, "backups", "kept-in-a", "kept-in-a.tar.gz")
	e.ok("--storage", "file://"+a, "--create-storage", "backup", "create", "kept-in-a", "--from", e.writeTarball("kept-in-a", 6))
	require.NoError(t, os.MkdirAll(bDir, 0o750))
	e.ok("--storage", "file://"+a, "backup", "create", "lost-with-a", "--from", e.writeTarball("lost-with-a", 6))
	require.FileExists(t, tarA)
	require.Contains(t, e.ok("backup", "get", "kept-in-a").stdout, "file://"+a+"/backups/kept-in-a/kept-in-a.tar.gz")

	r := e.run("--storage", "file://"+bDir, "backup", "delete", "kept-in-a", "--yes")
	requireOneErrorLine(t, r, "its storage location file://"+a+" is not one Lethe is configured with")
	require.FileExists(t, tarA)
	require.Equal(t, "Active", e.get("kept-in-a").Phase)
	both := []string{"--location", "b=file://" + bDir + ",default", "--location", "a=file://" + a}
	r = e.ok(append(both, "backup", "delete", "kept-in-a", "--yes")...)
	require.Contains(t, r.stdout, "purged tarball file://"+a+"/backups/kept-in-a/kept-in-a.tar.gz")
	require.NoFileExists(t, tarA)
	require.Len(t, e.readRecord()[recFirst], 6, "the plugins ran on the items from storage a")

	require.NoError(t, os.RemoveAll(a))
	r = e.run(append(both, "backup", "delete", "lost-with-a", "--yes")...)
	require.Equal(t, 1, r.code, "%s", r)
	requireOneErrorLine(t, r, "storage location file://"+a+" is unavailable: the folder does not exist")
	require.NoDirExists(t, a)
	require.Equal(t, "Active", e.get("lost-with-a").Phase)
}

// TestNotFoundAndPurgedAgree: get, describe, delete and undelete say the
// same thing, with the same exit code (4), for a name that does not exist
// and for one that was purged; a bad name is bad usage (2) for all.
func TestNotFoundAndPurgedAgree(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	e.create("bye", 3)
	e.ok("backup", "delete", "bye", "--yes")
	commands := func(name string) [][]string {
		return [][]string{
			{"backup", "get", name}, {"get", "backup", name}, {"describe", "backup", name},
			{"backup", "delete", name, "--yes"}, {"backup", "delete", name, "--dry-run"}, {"backup", "undelete", name},
		}
	}
	for name, want := range map[string]string{"nope": `backup "nope" not found`, "bye": `backup "bye" was purged at `} {
		for _, args := range commands(name) {
			r := e.run(args...)
			require.Equal(t, 4, r.code, "%s", r)
			requireOneErrorLine(t, r, want)
		}
	}
	for _, args := range commands("Bad_Name") {
		r := e.run(args...)
		require.Equal(t, 2, r.code, "%s", r)
		requireOneErrorLine(t, r, `invalid backup name "Bad_Name"`)
	}
}

// TestPluginTimeoutForAPluginNotInstalled: --plugin-timeout naming a plugin
// that is not installed is refused in one line listing the installed ones,
// and nothing runs.
func TestPluginTimeoutForAPluginNotInstalled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	e.create("good", 3)
	for _, name := range []string{"example.com/nope", "a-first"} {
		r := e.run("--plugin-timeout", name+"=1m", "backup", "delete", "good", "--yes", "--force")
		require.Equal(t, 2, r.code, "%s", r)
		requireOneErrorLine(t, r, "no installed plugin is named ")
		require.Contains(t, r.stderr, "(installed: "+recFirst+", "+recSecond+", "+recPods+")")
	}
	require.Equal(t, "Active", e.get("good").Phase)
	require.Zero(t, fileSize(e.record))
	e.ok("--plugin-timeout", recFirst+"=1m", "backup", "delete", "good", "--yes", "--force")
	e.requirePurged("good")
}

// TestMetricsAddrInUseFailsBeforeAnyWork: `lethe server --metrics-addr`
// with a port in use fails in one line before it starts a plugin or
// deletes anything (an expired backup stays).
func TestMetricsAddrInUseFailsBeforeAnyWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	e.create("expired", 3, "--ttl", "1s")
	time.Sleep(1100 * time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()

	r := e.run("server", "--metrics-addr", addr)
	require.Equal(t, 1, r.code, "%s", r)
	requireOneErrorLine(t, r, "--metrics-addr "+addr+": ")
	require.Contains(t, r.stderr, "address already in use")
	require.Equal(t, "Active", e.get("expired").Phase)
	require.Zero(t, fileSize(e.record))
}
