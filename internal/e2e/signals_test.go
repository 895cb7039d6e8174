package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// TestSIGTERMStopsGracefully is issue 3 point 3 and DESIGN §7.2 for a
// polite stop: SIGTERM mid-deletion ends lethe with the interrupted exit
// code, saves progress, leaves no plugin process, and a rerun finishes
// having delivered every item to every plugin that wants it. The gate
// plugin runs first (plugins run in name order) and holds the items, so
// the recorder's plugins behind it have seen none at the signal.
func TestSIGTERMStopsGracefully(t *testing.T) {
	t.Parallel()
	const n = 20
	e := newEnv(t, pluginGate, pluginRecorder)
	e.create("term", n)
	hold := filepath.Join(e.gate, "hold")
	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	p := e.start("backup", "delete", "term", "--yes")
	waitForFile(t, p, filepath.Join(e.gate, "started"))
	require.NotEmpty(t, pluginProcs(e.pluginDir()))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := p.wait(t)
	require.Equal(t, 130, r.code, "interrupted: %s", r)
	require.Contains(t, r.stderr, "stopping")
	left := waitNoPluginProcs(e.pluginDir(), 10*time.Second)
	require.Empty(t, left, "plugin processes %v outlived lethe after SIGTERM", left)
	require.Equal(t, "Deleting", e.get("term").Phase, "the deletion stays requested, to be resumed")

	require.NoError(t, os.Remove(hold))
	e.ok("backup", "delete", "term", "--yes")
	e.requirePurged("term")
	e.requireEveryItemDelivered(n)
}

// requireEveryItemDelivered checks that each of the n generated items
// (archivetest.SpecN) reached every plugin of the env that wants it, at
// least once: the gate and the recorder's plugins, as installed.
func (e *env) requireEveryItemDelivered(n int) {
	e.t.Helper()
	rec := e.readRecord()
	gated := uniq(readLines(e.t, filepath.Join(e.gate, "record")))
	_, withGate := os.Stat(filepath.Join(e.pluginDir(), pluginGate))
	_, withRecorder := os.Stat(filepath.Join(e.pluginDir(), pluginRecorder))
	require.True(e.t, withGate == nil || withRecorder == nil, "no recording plugin installed")
	for i := range n {
		s := archivetest.SpecN(i, 200)
		k := s.Key()
		if withGate == nil {
			require.True(e.t, gated[k], "%s never reached the gate plugin", k)
		}
		if withRecorder != nil {
			continue
		}
		require.GreaterOrEqual(e.t, rec[recFirst][k], 1, "%s never reached %s", k, recFirst)
		require.GreaterOrEqual(e.t, rec[recSecond][k], 1, "%s never reached %s", k, recSecond)
		if s.Resource == "pods" {
			require.GreaterOrEqual(e.t, rec[recPods][k], 1, "%s never reached %s", k, recPods)
		}
	}
}

// TestPerPluginTimeout is issue 3 point 2 from the CLI: --plugin-timeout
// bounds one plugin's items; the timed-out item fails with the duration,
// and the backup stays.
func TestPerPluginTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginGate)
	e.create("slow", 3)
	require.NoError(t, os.WriteFile(filepath.Join(e.gate, "hold"), nil, 0o600))
	r := e.run("--plugin-timeout", "e2e.lethe.io/gate=300ms", "backup", "delete", "slow", "--yes")
	require.Equal(t, 3, r.code, "%s", r)
	require.Contains(t, r.stdout, "timed out after 300ms")
	require.Equal(t, "Deleting", e.get("slow").Phase)
	require.True(t, strings.Contains(r.stdout, "NOT deleted"), r.stdout)
}
