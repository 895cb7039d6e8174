package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/server"
)

func newServerCmd(a *app) *cobra.Command {
	var workers int
	var metrics string
	c := &cobra.Command{
		Use:   "server",
		Short: "Run the daemon: TTL expiry, grace-window timers and queued deletions",
		Long: `The server deletes backups whose TTL has expired (through the same pipeline
and grace window as 'lethe backup delete'), moves scheduled deletions on when
their grace window ends, and runs deletions queued with
'lethe backup delete --async'. Deletions with blocked items are retried when
the plugin asked, failed ones with a growing backoff.

Several servers can share one PostgreSQL catalog (--store postgres://...):
leases make sure one deletion runs in one place at a time.

The first SIGINT or SIGTERM stops gracefully (progress is saved); a second
one aborts.`,
		Example: `  lethe server
  lethe server --store postgres://lethe@db/lethe --metrics-addr 127.0.0.1:9464`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if workers < 1 {
				return usageError{fmt.Errorf("--workers must be at least 1, got %d", workers)}
			}
			del, err := a.deleter(ctx)
			if err != nil {
				return err
			}
			srv, err := server.New(&server.Config{
				Store: a.store, Deleter: del, Logger: a.log, Workers: workers,
				MetricsAddr: metrics, DefaultDelay: a.g.defaultDelayD,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.s.Err, "lethe server: catalog %s, storage %s, %d plugins; Ctrl-C to stop\n",
				redactURL(a.g.store), a.blobs.URL(), len(a.host.Plugins()))
			return srv.Run(ctx)
		},
	}
	c.Flags().IntVar(&workers, "workers", server.WorkersDefault, "deletions that run at once")
	c.Flags().StringVar(&metrics, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464")
	return c
}
