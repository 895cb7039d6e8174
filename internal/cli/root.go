package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// globals are the flags every command shares.
type globals struct {
	home      string
	pluginDir string
	store     string
	storage   string
	logLevel  string
}

func newRoot(s Streams, aborts *abortHooks) (*cobra.Command, *app) {
	g := &globals{}
	a := &app{s: s, g: g, aborts: aborts}
	root := &cobra.Command{
		Use:   "lethe",
		Short: "Delete backups, and everything they created outside, safely",
		Long: `Lethe deletes backups and everything they created outside them: cloud
snapshots, object-store copies, database dumps. Plugins do the outside work;
Lethe runs them out of process, in alphanumeric order of their names, and
purges a backup only when every plugin has finished with every item.

A deletion can wait in a grace window (--deletion-delay, or the annotation
lethe.io/deletion-delay) during which 'lethe backup undelete' cancels it.

Everything lives under --home: the catalog (SQLite), the backup storage (a
folder) and the plugins. Each location can be changed on its own.`,
		Example: `  # Register a backup tarball, look at it, preview and run its deletion
  lethe backup create nightly-0412 --from nightly-0412.tar.gz --ttl 720h
  lethe backup list
  lethe backup delete nightly-0412 --dry-run
  lethe backup delete nightly-0412 --yes

  # Which plugins are installed, and what they select
  lethe plugin list`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.home, "home", "", "Lethe's home folder (env LETHE_HOME; default $XDG_DATA_HOME/lethe or ~/.local/share/lethe)")
	pf.StringVar(&g.pluginDir, "plugin-dir", "", "folder of plugin binaries (env LETHE_PLUGIN_DIR; default <home>/plugins)")
	pf.StringVar(&g.store, "store", "", "catalog URL: sqlite:///path/to.db or postgres://... (env LETHE_STORE; default sqlite://<home>/lethe.db)")
	pf.StringVar(&g.storage, "storage", "", "backup storage URL: file:///dir or s3://bucket/prefix?endpoint=... (env LETHE_STORAGE; default file://<home>/storage)")
	pf.StringVar(&g.logLevel, "log-level", "", "log level: error, warn, info, debug, trace (env LETHE_LOG_LEVEL; default warn)")

	root.AddCommand(newBackupCmd(a), newGetCmd(a), newDescribeCmd(a), newAuditCmd(a), newPluginCmd(a), newServerCmd(a), newVersionCmd(a))
	return root, a
}

// groupCmd makes a command that only groups subcommands: without
// arguments it shows its help; with an unknown subcommand it fails as a
// usage error instead of printing help and exiting 0.
func groupCmd(c *cobra.Command) *cobra.Command {
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
		}
		return cmd.Help()
	}
	return c
}

// resolve fills the globals from flags, then the environment, then
// defaults.
func (g *globals) resolve(getenv func(string) string) error {
	pick := func(flag *string, env string) {
		if *flag == "" {
			*flag = getenv(env)
		}
	}
	pick(&g.home, "LETHE_HOME")
	pick(&g.pluginDir, "LETHE_PLUGIN_DIR")
	pick(&g.store, "LETHE_STORE")
	pick(&g.storage, "LETHE_STORAGE")
	pick(&g.logLevel, "LETHE_LOG_LEVEL")
	if g.home == "" {
		data := getenv("XDG_DATA_HOME")
		if data == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return fmt.Errorf("cannot find a home folder: set --home or LETHE_HOME")
			}
			data = filepath.Join(h, ".local", "share")
		}
		g.home = filepath.Join(data, "lethe")
	}
	home, err := filepath.Abs(g.home)
	if err != nil {
		return fmt.Errorf("--home %q: %w", g.home, err)
	}
	g.home = home
	if g.pluginDir == "" {
		g.pluginDir = filepath.Join(g.home, "plugins")
	}
	if g.store == "" {
		g.store = "sqlite://" + filepath.Join(g.home, "lethe.db")
	}
	if g.storage == "" {
		g.storage = "file://" + filepath.Join(g.home, "storage")
	}
	if g.logLevel == "" {
		g.logLevel = "warn"
	}
	return nil
}
