// Command testplugin is a misbehaving plugin for pluginhost's tests. It
// serves the plugins named by -names; what Execute does depends on the
// item's name:
//
//   - "panic": panics.
//   - "crash-once": exits the process, the first time only (a marker file
//     in -state remembers).
//   - "crash": exits the process every time, after a line on stderr.
//   - "hang": blocks forever, ignoring ctx.
//   - "wait-ctx": waits for ctx and returns its error.
//   - "spawn": starts a grandchild "sleep 300", writes its pid to
//     -state/grandchild.pid, and succeeds.
//   - "log": logs a warning.
//   - "blocked", "skip", "fail": the matching outcome.
//   - anything else: done.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/lethehq/lethe/pkg/plugin"
)

// stderr is the real stderr: go-plugin redirects os.Stderr once serving.
var stderr = os.Stderr

func main() {
	names := flag.String("names", "lethe.io/test", "comma-separated plugin names")
	state := flag.String("state", os.TempDir(), "state directory")
	resources := flag.String("resources", "", "comma-separated included resources")
	protocol := flag.Int("protocol", plugin.ProtocolVersion, "protocol version to speak")
	longLine := flag.Int("long-stderr", 0, "write a line of this many bytes to stderr at start")
	refuseIf := flag.String("refuse-start-if", "", "exit at start, with a line on stderr, while this file exists")
	touch := flag.String("touch", "", "create this file at start (proves the binary ran)")
	flag.Parse()

	if *touch != "" {
		_ = os.WriteFile(*touch, nil, 0o644)
	}
	if *refuseIf != "" {
		if _, err := os.Stat(*refuseIf); err == nil {
			fmt.Fprintln(stderr, "refusing to start: broken on purpose")
			os.Exit(5)
		}
	}

	if *longLine > 0 {
		fmt.Fprintln(os.Stderr, strings.Repeat("x", *longLine))
	}
	var sel plugin.ResourceSelector
	if *resources != "" {
		sel.IncludedResources = strings.Split(*resources, ",")
	}
	var ps []*plugin.Plugin
	for _, n := range strings.Split(*names, ",") {
		ps = append(ps, &plugin.Plugin{Name: n, Version: "v0.0.1-test", Action: &action{state: *state, sel: sel}, MaxConcurrency: 4})
	}
	if *protocol == plugin.ProtocolVersion {
		plugin.Serve(ps...)
		return
	}
	p, err := plugin.GRPCPlugin(nil, ps...)
	if err != nil {
		panic(err)
	}
	hs := plugin.Handshake
	hs.ProtocolVersion = uint(*protocol)
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: map[int]goplugin.PluginSet{*protocol: {plugin.PluginSetKey: p}},
		GRPCServer:       plugin.NewGRPCServer,
	})
}

type action struct {
	state string
	sel   plugin.ResourceSelector
}

func (a *action) AppliesTo(context.Context) (plugin.ResourceSelector, error) { return a.sel, nil }

func (a *action) Execute(ctx context.Context, in *plugin.DeleteItemActionInput) error {
	switch in.Item.Name {
	case "panic":
		panic("test panic")
	case "crash-once":
		marker := filepath.Join(a.state, "crashed-once")
		if _, err := os.Stat(marker); err != nil {
			_ = os.WriteFile(marker, nil, 0o644)
			fmt.Fprintln(stderr, "crash-once: exiting")
			os.Exit(3)
		}
	case "crash":
		fmt.Fprintln(stderr, "boom: crashing on purpose")
		time.Sleep(10 * time.Millisecond)
		os.Exit(4)
	case "hang":
		select {}
	case "wait-ctx":
		<-ctx.Done()
		return ctx.Err()
	case "spawn":
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(a.state, "grandchild.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	case "log":
		plugin.Logger(ctx).Warn("hello from the plugin", "item", in.Item.Name)
	case "blocked":
		return plugin.Blocked(time.Minute, "locked")
	case "skip":
		return plugin.Skipped("not mine")
	case "fail":
		return errors.New("failed on purpose")
	}
	return nil
}
