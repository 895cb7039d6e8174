package deletion

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDeadLocalHolder(t *testing.T) {
	host, _ := os.Hostname()
	holder := func(pid int) string { return fmt.Sprintf("%s pid %d", host, pid) }

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
}
