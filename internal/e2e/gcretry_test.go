package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const gcRetryManifest = `kind: App
metadata: {name: a, namespace: prod}
---
kind: Volume
metadata:
  name: data
  namespace: prod
  ownerReferences: [{kind: App, name: a, blockOwnerDeletion: true}]
---
kind: Restore
metadata: {name: r, namespace: prod}
references: [{kind: Volume, namespace: prod, name: data, onTargetDelete: block}]
---
kind: Widget
metadata: {name: w, namespace: prod}
`

// TestResourceRetryThroughTheBinary: catalog resources use the one retry
// queue through the lethe binary. A plugin that fails on a resource is a
// Resource row and a block reference is a Wait row, both in `lethe retry
// list`; `lethe explain` shows the queue's row as it is now (after
// `retry discard` and `retry now` too, not the last run's); a requeued
// resource row is run by `lethe server`, which purges the resource.
func TestResourceRetryThroughTheBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	e.extra = append(e.extra, "LETHE_RETRY_MAX_ATTEMPTS=3")
	e.ok("apply", "-f", e.writeFile("m.yaml", gcRetryManifest))
	require.NoError(t, os.WriteFile(filepath.Join(e.control, "w.fail"), nil, 0o600))

	r := e.run("delete", "Widget", "w", "-n", "prod", "--yes", "--wait")
	require.Equal(t, 3, r.code, "stuck: %s", r)
	rows := e.retryRows("--type", "Resource")
	require.Len(t, rows, 1)
	row := rows[0]
	require.Equal(t, "Widget/prod/w", row.Key)
	require.Equal(t, "test.lethe.io/a-first", row.Plugin)
	require.Equal(t, "retryable", row.State)
	require.Equal(t, 1, row.Attempts)
	require.Contains(t, row.LastError, "injected failure for w")
	id := strconv.FormatInt(row.ID, 10)
	ex := e.ok("explain", "Widget", "w", "-n", "prod")
	require.Contains(t, ex.stdout, "retry row "+id+": plugin test.lethe.io/a-first failed, 1 attempt")

	// A block reference: a Wait row, with its next check.
	r = e.run("delete", "App", "a", "-n", "prod", "--yes", "--wait")
	require.Equal(t, 3, r.code, "stuck: %s", r)
	waits := e.retryRows("--type", "Wait")
	require.Len(t, waits, 1)
	require.Equal(t, "Volume/prod/data", waits[0].Key)
	require.Equal(t, "reference:Restore/prod/r", waits[0].ItemID)
	require.Equal(t, 1, waits[0].Attempts)
	require.True(t, waits[0].NextAttemptAt.After(time.Now()))
	list := e.ok("retry", "list")
	require.Contains(t, list.stdout, "reference:Restore/prod/r")

	// Operator controls on the resource row; explain follows at once.
	e.ok("retry", "discard", id)
	var exj struct {
		Retries []struct {
			ID       int64  `json:"id"`
			State    string `json:"state"`
			Attempts int    `json:"attempts"`
		} `json:"retries"`
	}
	out := e.ok("explain", "Widget", "w", "-n", "prod", "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &exj), "%s", out)
	require.Len(t, exj.Retries, 1)
	require.Equal(t, "discarded", exj.Retries[0].State)
	require.NoError(t, os.Remove(filepath.Join(e.control, "w.fail")))
	e.ok("retry", "now", id)
	out = e.ok("explain", "Widget", "w", "-n", "prod", "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &exj), "%s", out)
	require.Equal(t, "retryable", exj.Retries[0].State)
	require.Zero(t, exj.Retries[0].Attempts)
	audit := e.ok("audit", "--kind", "Widget", "--name", "w")
	require.Contains(t, audit.stdout, "retry-discard")
	require.Contains(t, audit.stdout, "retry-now")

	// The server runs the requeued row: the resource is purged; the
	// block reference still holds the volume.
	e.ok("plugin", "lock") // lethe server runs pinned plugins only
	srv := e.start("server")
	for i := 0; ; i++ {
		require.Less(t, i, 600, "the server did not purge Widget/prod/w\n%s", srv.errb)
		ex := e.run("explain", "Widget", "w", "-n", "prod")
		if strings.Contains(ex.stdout, "(Purged)") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
	res := srv.wait(t)
	require.Equal(t, 0, res.code, "%s", res)
	require.Empty(t, e.retryRows("--type", "Resource"))
	require.Len(t, e.retryRows("--type", "Wait"), 1, "the volume still waits for its referrer")
	ex = e.ok("explain", "Volume", "data", "-n", "prod")
	require.Contains(t, ex.stdout, "waits on reference:Restore/prod/r")
}
