//go:build unix

package plugin

import (
	"syscall"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
)

// StopProcess stops a plugin process that a go-plugin client started in a
// process group of its own (pgid, its pid), the way the Lethe host does,
// for plugintest to do the same:
//
//  1. go-plugin's Kill: the GRPCController Shutdown call, after which the
//     SDK's Serve returns and ends the plugin's descendants; go-plugin
//     waits up to 2 seconds for the process to exit, then SIGKILLs it;
//  2. SIGTERM to whatever is left of the process group (children of a
//     plugin not built with the SDK);
//  3. SIGKILL to the group after grace.
//
// It returns once the group has no live member, or after the SIGKILL.
func StopProcess(c *goplugin.Client, pgid int, grace time.Duration) {
	c.Kill()
	if pgid <= 0 || !groupAlive(pgid) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for groupAlive(pgid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
