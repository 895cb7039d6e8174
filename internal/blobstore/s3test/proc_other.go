//go:build !linux

package s3test

import "os/exec"

func setProcAttrs(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
