//go:build unix && !linux

package plugin

import (
	"syscall"
	"time"
)

func becomeSubreaper()                                  {}
func killDescendants(time.Duration)                     {}
func reapOrphans(_ time.Duration, stop <-chan struct{}) { <-stop }

func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }
