package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// writeFreshVeleroBackup writes a Completed Velero backup created now,
// with Velero's TTL: one the TTL controller leaves alone for 30 days.
func (e *env) writeFreshVeleroBackup(name string, created time.Time) {
	e.t.Helper()
	e.writeVeleroBackup(name, "Completed")
	obj := velerotest.BackupObject(name)
	obj["metadata"].(map[string]any)["creationTimestamp"] = created.Format(time.RFC3339)
	st := obj["status"].(map[string]any)
	st["startTimestamp"] = created.Format(time.RFC3339)
	st["completionTimestamp"] = created.Format(time.RFC3339)
	st["expiration"] = created.Add(velerotest.TTL).Format(time.RFC3339)
	data, err := json.Marshal(obj)
	require.NoError(e.t, err)
	require.NoError(e.t, os.WriteFile(filepath.Join(e.storageDir(), filepath.FromSlash(velero.MetadataKey(name))), data, 0o640))
}

// conditions is `backup get NAME -o json`'s conditions, by type:
// "Status Message".
func (e *env) conditions(name string) map[string]string {
	e.t.Helper()
	r := e.ok("backup", "get", name, "-o", "json")
	var b struct {
		Lifecycle struct {
			Conditions []struct{ Type, Status, Message string }
		}
	}
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &b), "%s", r)
	out := map[string]string{}
	for _, c := range b.Lifecycle.Conditions {
		out[c.Type] = c.Status + " " + c.Message
	}
	return out
}

// scrapeMetric is the value of one sample of the server's /metrics, or -1.
func scrapeMetric(t *testing.T, addr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(string(body))
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// eventually polls cond every 100 ms until it holds, or fails with what.
func eventually(t *testing.T, p *proc, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if p.exited() {
			t.Fatalf("server exited while waiting until %s: %s", what, p.wait(t))
		}
		if time.Now().After(deadline) {
			_ = p.cmd.Process.Kill()
			t.Fatalf("not within %s: %s\n%s", d, what, p.wait(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServerSyncsStorageWithoutAManualSync is issue 24 point 2 through
// the binary: `lethe server` imports a new Velero backup, with Velero's
// TTL, with no `backup sync` run by hand; a deleted backup whose folder
// is back in storage never comes back; a folder removed behind Lethe's
// back marks its backup MissingFromStorage (get, list, metric) without
// removing it; a storage folder that disappears concludes nothing; and
// only `backup sync --prune-missing` removes the missing backup, audited.
func TestServerSyncsStorageWithoutAManualSync(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginNoop)
	created := time.Now().UTC().Truncate(time.Second)
	e.writeFreshVeleroBackup("old", created)
	e.writeFreshVeleroBackup("gone", created)
	e.ok("backup", "sync")
	e.ok("backup", "delete", "gone", "--yes")
	e.requirePurged("gone")
	// Velero's copy of the deleted backup comes back (a replicated
	// bucket, a second Velero): it must never be re-imported.
	e.writeFreshVeleroBackup("gone", created)

	e.ok("plugin", "lock") // lethe server runs pinned plugins only
	metrics := freePort(t)
	p := e.startLong(3*time.Minute, "server", "--sync-interval", "300ms", "--metrics-addr", metrics)
	syncs := func(result string) float64 {
		return scrapeMetric(t, metrics, `lethe_storage_syncs_total{result="`+result+`"}`)
	}
	e.writeFreshVeleroBackup("new", created)
	eventually(t, p, 60*time.Second, "the server imported backup new", func() bool {
		return e.run("backup", "get", "new").code == 0
	})
	b := e.get("new")
	require.Equal(t, "Active", b.Phase)
	require.NotNil(t, b.Spec.ExpiresAt)
	require.True(t, b.Spec.ExpiresAt.Equal(created.Add(velerotest.TTL)), "Velero's TTL: %v", b.Spec.ExpiresAt)
	n := syncs("ok")
	eventually(t, p, 60*time.Second, "three more syncs", func() bool { return syncs("ok") >= n+3 })
	r := e.run("backup", "get", "gone")
	require.Equal(t, 4, r.code, "a deleted backup never comes back: %s", r)

	// A folder removed behind Lethe's back.
	require.NoError(t, os.RemoveAll(filepath.Join(e.storageDir(), "backups", "old")))
	eventually(t, p, 60*time.Second, "old is MissingFromStorage", func() bool {
		return strings.HasPrefix(e.conditions("old")["MissingFromStorage"], "True ")
	})
	require.Contains(t, e.conditions("old")["MissingFromStorage"], "backups/old/old.tar.gz is not in")
	require.Regexp(t, `old\s+Active MissingFromStorage`, e.ok("backup", "list").stdout)
	require.Contains(t, e.ok("backup", "get", "old").stdout, "MissingFromStorage")
	eventually(t, p, 30*time.Second, "the metric says one backup is missing", func() bool {
		return scrapeMetric(t, metrics, "lethe_backups_missing_from_storage") == 1
	})

	// The whole storage folder disappears (an unmount): unknown is not
	// absent, nothing is concluded, and the server keeps running.
	away := e.storageDir() + ".away"
	require.NoError(t, os.Rename(e.storageDir(), away))
	n = syncs("error")
	eventually(t, p, 60*time.Second, "two failed syncs", func() bool { return syncs("error") >= n+2 })
	require.NoError(t, os.Rename(away, e.storageDir()))
	require.Empty(t, e.conditions("new"), "nothing concluded from a folder that was gone")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	res := p.wait(t)
	require.Equal(t, 0, res.code, "%s", res)
	require.Contains(t, res.stderr, "storage sync failed; nothing concluded")

	// Only the explicit command removes it, audited.
	r = e.ok("backup", "sync", "--prune-missing")
	require.Regexp(t, `old\s+default\s+pruned`, r.stdout)
	require.Equal(t, 4, e.run("backup", "get", "old").code)
	require.Contains(t, e.ok("audit", "--kind", "Backup", "--name", "old").stdout, "--prune-missing")
	require.Equal(t, "Active", e.get("new").Phase)
}
