package pluginhost

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

// hostHelperEnv makes the test binary a host process for
// TestHostSIGKILLLeavesNothing: it runs the plugins of the folder the
// variable names, makes the plugin start children, prints the plugin's pid
// and waits to be killed.
const hostHelperEnv = "LETHE_PLUGINHOST_TEST_HOST_DIR"

// hostHelperRawEnv, set, runs a plugin of testplugin's -raw mode (no mTLS,
// no SDK) and sends it nothing.
const hostHelperRawEnv = "LETHE_PLUGINHOST_TEST_HOST_RAW"

func hostHelper(dir string) int {
	raw := os.Getenv(hostHelperRawEnv) != ""
	h, err := New(&Config{Dir: dir, DisableAutoMTLS: raw})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if raw {
		fmt.Printf("PID %d\n", h.plugins["example.com/test"].bin.cur.pid)
		select {}
	}
	ctx := context.Background()
	s, err := h.OpenSession(ctx, "example.com/test", plugin.Backup{Name: "b"}, SessionOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i, n := range []string{"spawn", "spawn-setsid", "spawn-orphan", "daemon"} {
		if err := s.Send(ctx, Item{ID: uint64(i + 1), Item: plugin.Item{Version: "v1", Resource: "configmaps", Namespace: "ns", Name: n, Object: []byte(`{}`)}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	s.CloseSend()
	for r := range s.Results() {
		if r.Outcome != plugin.OutcomeDone {
			fmt.Fprintln(os.Stderr, "item", r.ID, r.Outcome, r.Message)
			return 2
		}
	}
	b := h.plugins["example.com/test"].bin
	b.mu.Lock()
	pid := b.cur.pid
	b.mu.Unlock()
	fmt.Printf("PID %d\n", pid)
	select {}
}

// startHostHelper runs the test binary as a host of dir's plugins, and
// returns it and its plugin's pid.
func startHostHelper(t *testing.T, dir string, env ...string) (*exec.Cmd, int) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), hostHelperEnv+"="+dir), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the host helper reports its plugin's pid")
	pluginPID, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "PID ")))
	require.NoError(t, err)
	t.Cleanup(func() {
		if d, err := cgroupDir(); err == nil { // the helper's cgroups, left by its death
			sweepCgroups(d, hclog.NewNullLogger())
		}
	})
	return cmd, pluginPID
}

// TestHostSIGKILLLeavesNothing: after SIGKILL of the host process, neither
// the plugin process nor any of its children survives: a child, a child in
// a session of its own, an orphaned grandchild, and a double-forked daemon
// that ignores SIGTERM. This relies on the plugin: Linux sends it SIGTERM
// when the host dies (Pdeathsig), and the SDK's Serve, a subreaper, ends
// its descendants (SIGTERM, then SIGKILL) before it returns.
func TestHostSIGKILLLeavesNothing(t *testing.T) {
	dir := pluginDir(t)
	state := t.TempDir()
	addScript(t, dir, "test", "-names=example.com/test", "-state="+state)
	cmd, pluginPID := startHostHelper(t, dir)

	pids := map[string]int{"plugin": pluginPID}
	for _, f := range []string{"grandchild", "setsid", "orphan", "daemon"} {
		waitFor(t, f+".pid", func() bool { _, err := os.Stat(filepath.Join(state, f+".pid")); return err == nil })
		var data []byte
		waitFor(t, f+".pid content", func() bool {
			data, _ = os.ReadFile(filepath.Join(state, f+".pid"))
			return strings.TrimSpace(string(data)) != ""
		})
		pid, err := strconv.Atoi(strings.Fields(string(data))[0])
		require.NoError(t, err)
		require.True(t, alive(pid), "%s is running before the host dies", f)
		pids[f] = pid
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	for what, pid := range pids {
		deadline := time.Now().Add(15 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		require.False(t, alive(pid), "the %s (pid %d) outlived the host's SIGKILL", what, pid)
	}
	reapHelpersChildren(slices.Collect(maps.Values(pids)))
}

// reapHelpersChildren reaps the processes of a dead host helper that were
// re-parented to this test process (a subreaper once it ran a host): a
// host inside a host exists only in these tests.
// A zombie whose parent is still exiting comes to this process a moment
// later: each is polled for, up to 10s.
func reapHelpersChildren(pids []int) {
	self := os.Getpid()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			e, ok := readProc(pid)
			if !ok || (e.state != 'Z' && e.ppid != self) {
				break // gone, or not a zombie: not for this process to reap
			}
			if e.state == 'Z' && e.ppid == self {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				continue
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestSIGTERMRunsDeferredCode: the SDK's Serve returns on SIGTERM, so the
// plugin's deferred code runs; and on the host's Close, too.
func TestSIGTERMRunsDeferredCode(t *testing.T) {
	dir := pluginDir(t)
	marker := filepath.Join(t.TempDir(), "exited")
	addScript(t, dir, "test", "-names=example.com/test", "-on-exit="+marker)
	h := newHost(t, &Config{Dir: dir, RestartBackoff: time.Millisecond})
	pid := currentPID(t, h, "example.com/test")
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	waitFor(t, "the deferred code after SIGTERM", func() bool { _, err := os.Stat(marker); return err == nil })

	require.NoError(t, os.Remove(marker))
	got := run(t, h, "example.com/test", SessionOptions{}, "ok") // restarts the plugin
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	require.NoError(t, h.Close())
	require.FileExists(t, marker, "Close shuts the plugin down through go-plugin, and Serve returns")
}

// TestDeadHostsPluginCgroupIsKilledByTheNextHost: a plugin that ignores
// SIGTERM, with a double-forked daemon, survives the SIGKILL of its host:
// no code of the host runs, and the plugin ignores the SIGTERM Linux sends
// it. Outside a systemd unit (whose KillMode=control-group covers this),
// only the plugin's cgroup is left to find them: the next host kills what
// is in the cgroups of dead hosts, and removes them.
func TestDeadHostsPluginCgroupIsKilledByTheNextHost(t *testing.T) {
	if _, err := cgroupDir(); err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	dir := pluginDir(t)
	state := t.TempDir()
	addScript(t, dir, "test", "-raw=example.com/test", "-ignore-term", "-daemon-at-start="+filepath.Join(state, "daemon.pid"))
	cmd, pluginPID := startHostHelper(t, dir, hostHelperRawEnv+"=1")
	pids := append(daemonPIDs(t, state, 1), pluginPID)
	t.Cleanup(func() {
		_ = syscall.Kill(pluginPID, syscall.SIGKILL)
		waitFor(t, "the plugin to die", func() bool { return !alive(pluginPID) })
		reapHelpersChildren(pids)
	})

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	time.Sleep(200 * time.Millisecond) // the plugin got its SIGTERM, and ignored it
	for _, pid := range pids {
		require.True(t, alive(pid), "pid %d outlives its host: nothing of the host ran", pid)
	}

	newHost(t, &Config{Dir: pluginDir(t)})
	requireNoSurvivors(t, pids)
}
