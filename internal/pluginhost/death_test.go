package pluginhost

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

// hostHelperEnv makes the test binary a host process for
// TestHostSIGKILLLeavesNothing: it runs the plugins of the folder the
// variable names, makes the plugin start children, prints the plugin's pid
// and waits to be killed.
const hostHelperEnv = "LETHE_PLUGINHOST_TEST_HOST_DIR"

func hostHelper(dir string) int {
	h, err := New(&Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	s, err := h.OpenSession(ctx, "example.com/test", plugin.Backup{Name: "b"}, SessionOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i, n := range []string{"spawn", "spawn-setsid", "spawn-orphan"} {
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

// TestHostSIGKILLLeavesNothing: after SIGKILL of the host process, neither
// the plugin process nor any of its children survives: a child, a child in
// a session of its own, and an orphaned grandchild.
func TestHostSIGKILLLeavesNothing(t *testing.T) {
	dir := pluginDir(t)
	state := t.TempDir()
	addScript(t, dir, "test", "-names=example.com/test", "-state="+state)
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), hostHelperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the host helper reports its plugin's pid")
	pluginPID, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "PID ")))
	require.NoError(t, err)

	pids := map[string]int{"plugin": pluginPID}
	for _, f := range []string{"grandchild", "setsid", "orphan"} {
		waitFor(t, f+".pid", func() bool { _, err := os.Stat(filepath.Join(state, f+".pid")); return err == nil })
		var data []byte
		waitFor(t, f+".pid content", func() bool {
			data, _ = os.ReadFile(filepath.Join(state, f+".pid"))
			return strings.TrimSpace(string(data)) != ""
		})
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
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
