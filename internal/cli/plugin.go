package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newPluginCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "plugin",
		Short: "List and lock the DeleteItemAction plugins in the plugin folder",
	}
	c.AddCommand(newPluginListCmd(a))
	return c
}

type pluginView struct {
	Name            string `json:"name"`
	Binary          string `json:"binary"`
	ProtocolVersion int    `json:"protocolVersion"`
	Version         string `json:"version"`
	Selector        string `json:"selector"`
	MaxConcurrency  int    `json:"maxConcurrency"`
	Checksum        string `json:"checksum"`
	ChecksumStatus  string `json:"checksumStatus"`
}

func newPluginListCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "list",
		Short: "Start every plugin binary, handshake, and list what each serves",
		Long: `List starts every executable in the plugin folder (--plugin-dir), asks it
which plugins it serves and what items each one selects, and prints them in
the order they run: alphanumeric order of their names.`,
		Example: `  lethe plugin list
  lethe plugin list -o json`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		h, err := a.plugins(cmd.Context())
		if err != nil {
			return err
		}
		views := []pluginView{}
		for _, in := range h.Plugins() {
			views = append(views, pluginView{
				Name: in.Name, Binary: in.Binary, ProtocolVersion: in.ProtocolVersion, Version: in.Version,
				Selector: in.Selector.String(), MaxConcurrency: in.MaxConcurrency,
				Checksum: in.Checksum, ChecksumStatus: in.ChecksumStatus,
			})
		}
		if *out != "table" {
			return printStructured(a.s.Out, *out, views)
		}
		if len(views) == 0 {
			fmt.Fprintf(a.s.Out, "No plugins in %s. Copy plugin binaries there (see docs/plugin-authoring.md).\n", a.g.pluginDir)
			return nil
		}
		t := newTable(a.s.Out, "NAME", "VERSION", "PROTOCOL", "SELECTOR", "CHECKSUM", "BINARY")
		for _, v := range views {
			t.row(v.Name, v.Version, fmt.Sprint(v.ProtocolVersion), v.Selector, v.ChecksumStatus+" "+shortDigest(v.Checksum), v.Binary)
		}
		return t.flush()
	}
	return c
}
