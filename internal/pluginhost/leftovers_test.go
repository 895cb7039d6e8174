package pluginhost

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

// Issue 23, point 3: plugins leave nothing behind. Each test runs a plugin
// that double-forks a daemon (a child in a session of its own starts it and
// exits) that ignores SIGTERM, ends the plugin one way or another, and
// counts the daemons still running from /proc. Each runs twice: with a
// cgroup per plugin (where cgroup v2 is writable, as here when run as
// root), and with only Lethe's child subreaper (DisableCgroups).

// inBothModes runs f without cgroups, then with them when this machine
// lets Lethe make them.
func inBothModes(t *testing.T, f func(t *testing.T, cfg Config)) {
	t.Run("subreaper", func(t *testing.T) { f(t, Config{DisableCgroups: true}) })
	t.Run("cgroup", func(t *testing.T) {
		if _, err := cgroupDir(); err != nil {
			t.Skipf("no writable cgroup v2 here: %v", err)
		}
		f(t, Config{})
	})
}

// daemonPIDs reads the pids the plugin's daemons appended to
// state/daemon.pid, waiting for n of them.
func daemonPIDs(t *testing.T, state string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, "the daemons' pids", func() bool {
		data, _ := os.ReadFile(filepath.Join(state, "daemon.pid"))
		pids = pids[:0]
		for _, f := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(f)
			require.NoError(t, err)
			pids = append(pids, pid)
		}
		return len(pids) >= n
	})
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pids
}

// requireRealDaemon checks that pid is what the test means: alive, in a
// session other than the plugin's, no longer the plugin's child, and
// ignoring SIGTERM.
func requireRealDaemon(t *testing.T, pid, pluginPID int) {
	t.Helper()
	e, ok := readProc(pid)
	require.True(t, ok && e.state != 'Z', "daemon %d runs", pid)
	p, ok := readProc(pluginPID)
	require.True(t, ok)
	require.NotEqual(t, p.sid, e.sid, "the daemon is in a session of its own")
	require.NotEqual(t, p.pgid, e.pgid, "the daemon is outside the plugin's process group")
	// Go's signal.Ignore keeps the runtime's handler (SigCgt, not SigIgn):
	// check what it does instead.
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	time.Sleep(200 * time.Millisecond)
	require.True(t, alive(pid), "the daemon ignores SIGTERM")
}

// requireNoSurvivors waits until none of pids runs, and until none of
// this process's children is a zombie left unreaped; it fails after 30s.
func requireNoSurvivors(t *testing.T, pids []int) {
	t.Helper()
	self := os.Getpid()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []int
		for _, pid := range pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		var zombies []int
		for _, e := range readProcs() {
			if e.ppid == self && e.state == 'Z' && !reaper.isPlugin(e.pid) {
				zombies = append(zombies, e.pid)
			}
		}
		if len(left) == 0 && len(zombies) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var comms []string
			for _, pid := range zombies {
				data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
				comms = append(comms, strings.TrimSpace(string(data)))
			}
			t.Fatalf("survivors %v, unreaped zombies %v: %q", left, zombies, comms)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// requireCgroupMode checks that the plugin process pid runs in a cgroup of
// its own exactly when cfg asks for cgroups.
func requireCgroupMode(t *testing.T, cfg Config, pid int) {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	require.NoError(t, err)
	own := strings.Contains(string(data), "/"+cgroupPrefix(os.Getpid()))
	require.Equal(t, !cfg.DisableCgroups, own, "the plugin's cgroup: %s", data)
}

func leftoverHost(t *testing.T, cfg Config) (*Host, string, int) {
	t.Helper()
	dir := pluginDir(t)
	state := t.TempDir()
	addScript(t, dir, "test", "-names=example.com/test", "-state="+state)
	cfg.Dir = dir
	cfg.CancelGrace = 50 * time.Millisecond
	cfg.KillGrace = 100 * time.Millisecond // shorter than the SDK's own ShutdownGrace: Lethe, not the SDK, must end the daemon
	cfg.RestartBackoff = time.Millisecond
	h := newHost(t, &cfg)
	pid := currentPID(t, h, "example.com/test")
	requireCgroupMode(t, cfg, pid)
	return h, state, pid
}

// TestItemTimeoutLeavesNoSurvivors: a plugin killed for a timed-out item
// leaves no daemon behind, nor a zombie.
func TestItemTimeoutLeavesNoSurvivors(t *testing.T) {
	inBothModes(t, func(t *testing.T, cfg Config) {
		h, state, pid := leftoverHost(t, cfg)
		got := run(t, h, "example.com/test", SessionOptions{ItemTimeout: 3 * time.Second}, "daemon", "daemon-hang") // long enough to double-fork on a busy machine
		require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
		require.Equal(t, plugin.OutcomeFailed, got[2].Outcome)
		require.Contains(t, got[2].Message, "timed out after 3s")
		pids := daemonPIDs(t, state, 2)
		require.False(t, alive(pid), "the hung plugin was killed")
		requireNoSurvivors(t, pids)
	})
}

// TestPluginCrashLeavesNoSurvivors: a plugin that exits with an error
// (skipping the SDK's own cleanup) leaves no daemon behind.
func TestPluginCrashLeavesNoSurvivors(t *testing.T) {
	inBothModes(t, func(t *testing.T, cfg Config) {
		h, state, _ := leftoverHost(t, cfg)
		got := run(t, h, "example.com/test", SessionOptions{}, "daemon-crash")
		require.Equal(t, plugin.OutcomeFailed, got[1].Outcome)
		requireNoSurvivors(t, daemonPIDs(t, state, 1))
	})
}

// TestPluginNormalExitLeavesNoSurvivors: a plugin that exits with status
// 0 on its own leaves no daemon behind; nor does one stopped by Close.
func TestPluginNormalExitLeavesNoSurvivors(t *testing.T) {
	inBothModes(t, func(t *testing.T, cfg Config) {
		h, state, _ := leftoverHost(t, cfg)
		got := run(t, h, "example.com/test", SessionOptions{}, "daemon-exit")
		require.Equal(t, plugin.OutcomeFailed, got[1].Outcome)
		requireNoSurvivors(t, daemonPIDs(t, state, 1))
		require.NoError(t, os.Remove(filepath.Join(state, "daemon.pid")))

		got = run(t, h, "example.com/test", SessionOptions{}, "daemon")
		require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
		pids := daemonPIDs(t, state, 1)
		requireRealDaemon(t, pids[0], currentPID(t, h, "example.com/test"))
		require.NoError(t, h.Close())
		requireNoSurvivors(t, pids)
	})
}

// TestTimedOutPluginGetsSIGTERMFirst: a plugin killed for a timed-out item
// gets SIGTERM first, so the SDK's Serve returns and its deferred code
// runs, within the grace.
func TestTimedOutPluginGetsSIGTERMFirst(t *testing.T) {
	dir := pluginDir(t)
	marker := filepath.Join(t.TempDir(), "exited")
	addScript(t, dir, "test", "-names=example.com/test", "-on-exit="+marker)
	h := newHost(t, &Config{Dir: dir, CancelGrace: 50 * time.Millisecond, KillGrace: 10 * time.Second, RestartBackoff: time.Millisecond})
	got := run(t, h, "example.com/test", SessionOptions{ItemTimeout: 100 * time.Millisecond}, "hang")
	require.Contains(t, got[1].Message, "timed out")
	require.FileExists(t, marker, "the plugin's deferred code ran: it was sent SIGTERM, not SIGKILL at once")
}

// TestPluginIgnoringSIGTERMIsKilledAfterTheGrace: a plugin that ignores
// SIGTERM is SIGKILLed once the grace is over.
func TestPluginIgnoringSIGTERMIsKilledAfterTheGrace(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-raw=example.com/test", "-ignore-term")
	const grace = 300 * time.Millisecond
	h := newHost(t, &Config{Dir: dir, DisableAutoMTLS: true, KillGrace: grace})
	b := h.plugins["example.com/test"].bin
	b.mu.Lock()
	p := b.cur
	b.mu.Unlock()
	start := time.Now()
	b.fail(p, os.ErrDeadlineExceeded)
	require.False(t, alive(p.pid), "killed")
	require.GreaterOrEqual(t, time.Since(start), grace, "after the grace, not at once")
}

// TestIdlePluginCrashLeavesNoSurvivors: a plugin process that dies while no
// session uses it is noticed, and what it left is ended then, not at its
// next use.
func TestIdlePluginCrashLeavesNoSurvivors(t *testing.T) {
	inBothModes(t, func(t *testing.T, cfg Config) {
		h, state, pid := leftoverHost(t, cfg)
		got := run(t, h, "example.com/test", SessionOptions{}, "daemon")
		require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
		pids := daemonPIDs(t, state, 1)
		require.True(t, alive(pids[0]))
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		requireNoSurvivors(t, pids)
	})
}

// TestSweepSparesOtherChildren: the sweep neither kills nor reaps a child
// that Lethe started itself outside pluginhost (os/exec waits for it): one
// in a process group of its own stays alive, and one that exited is still
// there for its Cmd.Wait, with its status.
func TestSweepSparesOtherChildren(t *testing.T) {
	reaper.enable(hclog.NewNullLogger())
	running := exec.Command("sleep", "60")
	running.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, running.Start())
	t.Cleanup(func() { _ = running.Process.Kill(); _ = running.Wait() })
	exited := exec.Command("sh", "-c", "exit 7")
	require.NoError(t, exited.Start())
	waitFor(t, "the child to exit", func() bool {
		e, ok := readProc(exited.Process.Pid)
		return ok && e.state == 'Z'
	})

	dead := exec.Command("true") // stands for a plugin that ended
	require.NoError(t, dead.Run())
	reaper.sweep(dead.Process.Pid, true, nil)
	reaper.sweep(0, true, nil)

	require.True(t, alive(running.Process.Pid), "a child in a process group of its own is not a plugin's")
	err := exited.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "os/exec still waits for its child")
	require.Equal(t, 7, ee.ExitCode())
}
