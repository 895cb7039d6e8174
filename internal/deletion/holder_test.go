package deletion

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDeadLocalHolder(t *testing.T) {
	host, _ := os.Hostname()
	ns := pidNamespace()
	require.NotEmpty(t, ns, "Linux names the PID namespace")
	holder := func(pid int) string { return fmt.Sprintf("%s pid %d ns %s", host, pid, ns) }
	require.Equal(t, holder(os.Getpid()), defaultHolder())

	live := exec.Command("sleep", "60")
	require.NoError(t, live.Start())
	require.False(t, deadLocalHolder(holder(live.Process.Pid)), "a running process is alive")

	// Killed but not reaped: a zombie, which is dead.
	require.NoError(t, live.Process.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool { return deadLocalHolder(holder(live.Process.Pid)) }, 5e9, 1e7)
	_ = live.Wait()
	require.True(t, deadLocalHolder(holder(live.Process.Pid)), "a reaped process is dead")

	require.False(t, deadLocalHolder(holder(os.Getpid())), "this process is alive")
	require.False(t, deadLocalHolder("other.example pid 1"), "another host's process is never presumed dead")
	require.False(t, deadLocalHolder("not a holder name"))
	require.False(t, deadLocalHolder(fmt.Sprintf("%s pid %d ns 1", host, live.Process.Pid)),
		"a process of another PID namespace (a container sharing the hostname) is never presumed dead")
	require.False(t, deadLocalHolder(fmt.Sprintf("%s pid %d", host, live.Process.Pid)), "without a namespace, never presumed dead")
	// A live process whose command name holds a Z or an X (the states of
	// a dead one) is alive: the state is read after the name.
	sleepBin, err := exec.LookPath("sleep")
	require.NoError(t, err)
	odd := filepath.Join(t.TempDir(), "sleepXZ")
	data, err := os.ReadFile(sleepBin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(odd, data, 0o700))
	named := exec.Command(odd, "60")
	require.NoError(t, named.Start())
	t.Cleanup(func() { _ = named.Process.Kill(); _ = named.Wait() })
	require.False(t, deadLocalHolder(holder(named.Process.Pid)), "a running process named sleepXZ is alive")

	// kill(2) reads a pid under 1 as a process group (or every process):
	// such a name is never presumed dead.
	for _, pid := range []int{0, -1, -2147483647} {
		require.False(t, deadLocalHolder(holder(pid)), "pid %d", pid)
	}
}
