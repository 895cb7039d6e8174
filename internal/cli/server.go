package cli

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/server"
)

func newServerCmd(a *app) *cobra.Command {
	var workers int
	var metrics string
	var noPlugins bool
	c := &cobra.Command{
		Use:   "server",
		Short: "Run the daemon: TTL expiry, grace-window timers and queued deletions",
		Long: `The server deletes backups whose TTL has expired (through the same pipeline
and grace window as 'lethe backup delete'), moves scheduled deletions on when
their grace window ends, and runs deletions queued with
'lethe backup delete --async'. Items that a plugin failed or blocked wait in
the retry queue ('lethe retry list'): the server tries them again on a
backoff (--retry-backoff), never before the plugin's retryAfter, and after
--retry-max-attempts discards them (condition DeletionStuck, an event, and a
signed POST to each --notify-webhook). Nothing is purged meanwhile.

Several servers can share one PostgreSQL catalog (--store postgres://...):
leases make sure one deletion runs in one place at a time.

The server never purges a backup whose expected plugin is missing or cannot
start: the deletion stays, with the condition PluginMissing naming the
plugins (lethe backup get/list, metric lethe_backups_plugin_missing), and is
looked at again every few minutes. It refuses to start with an empty plugin
folder (exit 5) unless --no-plugins says that is intended.

The first SIGINT or SIGTERM stops gracefully (progress is saved); a second
one aborts.`,
		Example: `  lethe server
  lethe server --store postgres://lethe@db/lethe --metrics-addr 127.0.0.1:9464
  LETHE_NOTIFY_SECRET=... lethe server --notify-webhook https://hooks.example/lethe --retry-max-attempts 8`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if workers < 1 {
				return usageError{fmt.Errorf("--workers must be at least 1, got %d", workers)}
			}
			// Bind the metrics address first: one taken fails here,
			// before any plugin starts or any work is claimed.
			var ln net.Listener
			if metrics != "" {
				var err error
				if ln, err = server.Listen(metrics); err != nil {
					return err
				}
				defer ln.Close()
			}
			del, err := a.deleter(ctx)
			if err != nil {
				return err
			}
			if len(a.host.Plugins()) == 0 && len(a.host.Problems()) == 0 && !noPlugins {
				return fmt.Errorf("plugin folder %s is empty: %w", a.g.pluginDir, deletion.ErrNoPlugins)
			}
			for _, p := range a.host.Problems() {
				a.log.Warn("plugin binary not loaded; deletions that expect its plugins will wait", "binary", p.Binary, "plugins", p.Names, "error", p.Err)
			}
			col, err := a.collector(ctx)
			if err != nil {
				return err
			}
			srv, err := server.New(&server.Config{
				Store: a.store, Deleter: del, Collector: col, Logger: a.log, Workers: workers,
				MetricsListener: ln, DefaultDelay: a.g.defaultDelayD, NoPlugins: noPlugins,
				NotifySecret: a.g.retry.secret,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.s.Err, "lethe server: catalog %s, storage %s, %d plugins; Ctrl-C to stop\n",
				catalog.RedactURL(a.g.store), a.blobs.URL(), len(a.host.Plugins()))
			return srv.Run(ctx)
		},
	}
	c.Flags().IntVar(&workers, "workers", server.WorkersDefault, "deletions that run at once")
	c.Flags().StringVar(&metrics, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464")
	c.Flags().BoolVar(&noPlugins, "no-plugins", false, "run deletions with no plugin installed at all (audited on each purge)")
	return c
}
