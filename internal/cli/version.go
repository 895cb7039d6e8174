package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/pkg/plugin"
)

// Version is set at build time with -ldflags "-X github.com/lethehq/lethe/internal/cli.Version=v1.2.3".
var Version = "dev"

func newVersionCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "version",
		Short: "Print Lethe's version and plugin protocol version",
		Args:  exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.RunE = func(*cobra.Command, []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		v := map[string]any{"kind": "Version", "version": version(), "pluginProtocol": plugin.ProtocolVersion, "go": runtime.Version()}
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					v["commit"] = s.Value
				}
			}
		}
		if structured(*out) {
			return printObject(a.s.Out, *out, "Version", v)
		}
		fmt.Fprintf(a.s.Out, "lethe %s (plugin protocol %d, %s)\n", version(), plugin.ProtocolVersion, runtime.Version())
		return nil
	}
	return c
}

// version is the version set at build time (make: `git describe --tags`);
// failing that, the module version `go install ...@vX` recorded.
func version() string {
	if Version != "dev" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Version
}
