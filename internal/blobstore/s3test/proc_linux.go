package s3test

import (
	"os/exec"
	"syscall"
)

// setProcAttrs puts the server in a process group of its own, and has the
// kernel kill it if the test binary dies first.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the server and anything it started.
func killGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
