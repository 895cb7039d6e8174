package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/pkg/plugin"
)

// globals are the flags every command shares.
type globals struct {
	home      string
	pluginDir string
	// pluginDirDefault: pluginDir is <home>/plugins, not given by a flag
	// or LETHE_PLUGIN_DIR; only then is a missing folder created.
	pluginDirDefault bool
	// storageDefault: storage is file://<home>/storage, not given; only
	// then, or with --create-storage, is a missing folder created.
	storageDefault bool
	createStorage  bool
	// veleroPluginDir holds unmodified Velero DeleteItemAction plugins;
	// veleroPluginDirDefault: it is <home>/velero-plugins, which may be
	// absent (no Velero plugins), while a folder given must exist.
	veleroPluginDir        string
	veleroPluginDirDefault bool
	store                  string
	storage                string
	logLevel               string
	logFormat              string
	config                 string
	// federation is the peer configuration file (docs/federation.md).
	federation string

	itemTimeout    string
	killGrace      string
	pluginTimeouts []string
	defaultDelay   string
	trust          trustFlags
	retry          retryFlags
	locs           locationFlags

	// Parsed by resolve.
	itemTimeoutD    time.Duration
	killGraceD      time.Duration
	pluginTimeoutsD map[string]time.Duration
	defaultDelayD   time.Duration
}

func newRoot(s Streams, aborts *abortHooks) (*cobra.Command, *app) {
	g := &globals{}
	a := &app{s: s, g: g, aborts: aborts}
	root := &cobra.Command{
		Use:     "lethe",
		Version: Version,
		Short:   "Delete backups, and everything they created outside, safely",
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
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{flagValueError(err)} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.home, "home", "", "Lethe's home folder (env LETHE_HOME; default $XDG_DATA_HOME/lethe or ~/.local/share/lethe)")
	pf.StringVar(&g.pluginDir, "plugin-dir", "", "folder of plugin binaries (env LETHE_PLUGIN_DIR; default <home>/plugins)")
	pf.StringVar(&g.veleroPluginDir, "velero-plugin-dir", "", "folder of unmodified Velero DeleteItemAction plugin binaries, run beside Lethe's (env LETHE_VELERO_PLUGIN_DIR; default <home>/velero-plugins, if it exists)")
	pf.StringVar(&g.store, "store", "", "catalog URL: sqlite:///path/to.db or postgres://... (env LETHE_STORE; default sqlite://<home>/lethe.db)")
	pf.BoolVar(&g.createStorage, "create-storage", false, "create the --storage folder (file://) if it does not exist; without it a missing folder is refused, as a misspelt path")
	pf.StringVar(&g.storage, "storage", "", "backup storage URL: file:///dir or s3://bucket/prefix?endpoint=... (env LETHE_STORAGE; default file://<home>/storage)")
	pf.StringVar(&g.config, "config", "", "config `FILE` holding settings under their flag names; flags, then environment variables, win over it (env LETHE_CONFIG; default <home>/config.yaml, if present)")
	pf.StringVar(&g.logFormat, "log-format", "", "log format: text or json (env LETHE_LOG_FORMAT; default text)")
	pf.StringVar(&g.logLevel, "log-level", "", "log level: error, warn, info, debug, trace (env LETHE_LOG_LEVEL; default warn, info for lethe server)")
	pf.StringVar(&g.itemTimeout, "item-timeout", "", "how long a plugin may take on one item before it is cancelled, then killed and restarted (env LETHE_ITEM_TIMEOUT; default 5m)")
	pf.StringVar(&g.killGrace, "plugin-kill-grace", "", "how long a plugin being killed (hung, crashed, restarted, shut down) has between SIGTERM and SIGKILL (env LETHE_PLUGIN_KILL_GRACE; default 2s)")
	pf.StringArrayVar(&g.pluginTimeouts, "plugin-timeout", nil, "per-plugin item timeout NAME=DURATION, e.g. example.com/ebs=30m (repeatable; env LETHE_PLUGIN_TIMEOUTS, comma-separated)")
	pf.StringVar(&g.federation, "federation", "", "peer configuration `FILE` (docs/federation.md): this server's peer name, listen address, CA, certificate and key, and its peers; lethe server serves the peer protocol with it, apply checks peer: references against it (env LETHE_FEDERATION)")
	pf.StringVar(&g.defaultDelay, "default-deletion-delay", "", "grace window for backups without a lethe.io/deletion-delay annotation (env LETHE_DEFAULT_DELETION_DELAY; default none)")
	g.trust.add(pf)
	g.retry.add(pf)
	g.locs.add(pf)

	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		return applyConfig(root, cmd, s.Getenv)
	}
	// --version without -v: -v is left free (for verbosity), as kubectl
	// and velero leave it; cobra adds -v only when it defines the flag.
	root.Flags().Bool("version", false, "print the version (as lethe version)")
	root.Version = version()
	root.SetVersionTemplate("lethe {{.Version}} (plugin protocol " + fmt.Sprint(plugin.ProtocolVersion) + ", " + runtime.Version() + ")\n") // as lethe version
	root.AddCommand(newBackupCmd(a), newGetCmd(a), newDescribeCmd(a), newAuditCmd(a), newPluginCmd(a), newServerCmd(a), newRetryCmd(a), newMigrateCmd(a), newVersionCmd(a),
		newApplyCmd(a), newDeleteCmd(a), newUndeleteCmd(a), newExplainCmd(a), newFinalizeCmd(a), newRetentionCmd(a))
	root.AddCommand(newLocationCmd(a), newStatusCmd(a), newPeerCmd(a), newTokenCmd(a), newConsoleCmd(a))
	addGrammarFooter(root)
	fixCompletion(root)
	a.registerCompletions(root)
	return root, a
}

// fixCompletion makes 'lethe completion SHELL' refuse a shell it does not
// know (exit 2) instead of printing help with exit 0.
func fixCompletion(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		var shells []string
		for _, sub := range c.Commands() {
			shells = append(shells, sub.Name())
		}
		c.Args = func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("completion %s: unknown shell; use %s", termtext.Quote(args[0]), strings.Join(shells, ", "))}
			}
			return nil
		}
		c.RunE = func(*cobra.Command, []string) error {
			return usageError{fmt.Errorf("completion needs a shell: %s", strings.Join(shells, ", "))}
		}
	}
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
	pick(&g.veleroPluginDir, "LETHE_VELERO_PLUGIN_DIR")
	pick(&g.store, "LETHE_STORE")
	pick(&g.storage, "LETHE_STORAGE")
	pick(&g.logLevel, "LETHE_LOG_LEVEL")
	pick(&g.logFormat, "LETHE_LOG_FORMAT")
	pick(&g.itemTimeout, "LETHE_ITEM_TIMEOUT")
	pick(&g.killGrace, "LETHE_PLUGIN_KILL_GRACE")
	pick(&g.defaultDelay, "LETHE_DEFAULT_DELETION_DELAY")
	pick(&g.federation, "LETHE_FEDERATION")
	if len(g.pluginTimeouts) == 0 {
		if v := getenv("LETHE_PLUGIN_TIMEOUTS"); v != "" {
			g.pluginTimeouts = strings.Split(v, ",")
		}
	}
	if err := g.trust.resolve(getenv); err != nil {
		return err
	}
	if err := g.retry.resolve(getenv); err != nil {
		return err
	}
	if g.itemTimeout != "" {
		d, err := backup.ParseDuration(g.itemTimeout)
		if err != nil || d == 0 {
			return usageError{fmt.Errorf("--item-timeout %q: use a positive duration such as 90s or 10m", g.itemTimeout)}
		}
		g.itemTimeoutD = d
	}
	if g.killGrace != "" {
		d, err := backup.ParseDuration(g.killGrace)
		if err != nil || d == 0 {
			return usageError{fmt.Errorf("--plugin-kill-grace %q: use a positive duration such as 2s", g.killGrace)}
		}
		g.killGraceD = d
	}
	g.pluginTimeoutsD = map[string]time.Duration{}
	for _, kv := range g.pluginTimeouts {
		name, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		d, err := backup.ParseDuration(val)
		if !ok || name == "" || err != nil || d == 0 {
			return usageError{fmt.Errorf("--plugin-timeout %q: use NAME=DURATION, e.g. example.com/ebs=30m", kv)}
		}
		if _, err := plugin.NormalizeName(name); err != nil {
			return usageError{fmt.Errorf("--plugin-timeout %q: %w", kv, err)}
		}
		g.pluginTimeoutsD[name] = d
	}
	if g.defaultDelay != "" {
		d, err := backup.ParseDuration(g.defaultDelay)
		if err != nil {
			return usageError{fmt.Errorf("--default-deletion-delay: %w", err)}
		}
		g.defaultDelayD = d
	}
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
		g.pluginDirDefault = true
		g.pluginDir = filepath.Join(g.home, "plugins")
	}
	if g.veleroPluginDir == "" {
		g.veleroPluginDirDefault = true
		g.veleroPluginDir = filepath.Join(g.home, "velero-plugins")
	}
	if g.store == "" {
		g.store = "sqlite://" + filepath.Join(g.home, "lethe.db")
	}
	if err := g.locs.resolve(getenv, &g.storage); err != nil {
		return err
	}
	if g.storage == "" {
		g.storageDefault = true
		g.storage = "file://" + filepath.Join(g.home, "storage")
	}
	if g.logLevel == "" {
		g.logLevel = "warn"
	}
	switch g.logFormat {
	case "", "text", "json":
	default:
		return usageError{fmt.Errorf("--log-format %q: use text or json", g.logFormat)}
	}
	return nil
}
