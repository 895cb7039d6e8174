package cli

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/api"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/federation"
	"github.com/lethehq/lethe/internal/leader"
	"github.com/lethehq/lethe/internal/retention/planner"
	"github.com/lethehq/lethe/internal/server"
	"github.com/lethehq/lethe/internal/termtext"
)

func newServerCmd(a *app) *cobra.Command {
	var (
		workers                   int
		metrics                   string
		apiListen                 api.ListenConfig
		noPlugins                 bool
		leaseTTL, leaderTTL, poll time.Duration
		retentionInterval         time.Duration
		syncInterval              time.Duration
	)
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

Several servers can share one PostgreSQL catalog (--store postgres://...).
Every replica claims queued deletions with leases, so work spreads across
them and one deletion runs in one place at a time. One replica, elected
through a lease in the catalog, runs TTL expiry and the grace-window timers;
a stopped leader hands over at once, a killed one after --leader-lease-ttl.
The leader also syncs storage every --sync-interval (default 1m, as Velero;
0 turns it off), as 'lethe backup sync' does: new Velero backups are
imported with their TTL, phases are re-read, and a deleted backup never comes
back. A backup whose tarball is no longer listed gets the condition
MissingFromStorage and stays in the catalog until 'lethe backup sync
--prune-missing'; a location that cannot be read concludes nothing.

On SQLite a second server on the same file is safe (it follows, and shares
the queue) but adds nothing: SQLite has one writer.

With --metrics-addr it serves, on that address only:
  /metrics   Prometheus metrics
  /healthz   200 while the process is up
  /readyz    200 when the catalog answers and the plugins are loaded, 503
             otherwise; says whether this replica is the leader
The address is bound before any work starts: one in use fails at once.

With --api-addr it serves the HTTP API (/api/v1/, docs/api.md) and the
console on that address, with /healthz and /readyz; everything else needs a
token (lethe token create). A port alone (:8443) binds loopback; any other
host is refused without --api-tls-cert and --api-tls-key.

The server never purges a backup whose expected plugin is missing or cannot
start: the deletion stays, with the condition PluginMissing naming the
plugins (lethe backup get/list, metric lethe_backups_plugin_missing), and is
looked at again every few minutes. It refuses to start with an empty plugin
folder (exit 5) unless --no-plugins says that is intended.

It enforces the RetentionPolicies in mode enforce (see 'lethe retention
plan'): every --retention-interval and soon after backups or policies
change, it schedules the deletions of their plans, with each policy's
deletionDelay, audited as retention:<policy>.

Every plugin it runs must be pinned in a lock file (lethe plugin lock): a
plugin folder with binaries but no lock file fails the start, and a binary
the lock does not list is refused. --require-plugin-lock=false turns this
off, with a warning.

It logs at info level unless told otherwise: one line when each deletion
starts and one when it ends (counts by plugin, duration, what was purged).
The first SIGINT or SIGTERM stops gracefully (progress is saved, the leader
lease is handed over); a second one aborts.`,
		Example: `  lethe server
  lethe server --store postgres://lethe@db/lethe --metrics-addr 127.0.0.1:9464
  lethe server --api-addr 127.0.0.1:8443
  lethe server --notify-webhook https://hooks.example/lethe,secret-file=/etc/lethe/hook.whsec --retry-max-attempts 8
  lethe server --config /etc/lethe/config.yaml --log-format json
  curl -s 127.0.0.1:9464/readyz`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if workers < 1 || workers > server.WorkersMax {
				return usageError{fmt.Errorf("--workers must be between 1 and %d, got %d", server.WorkersMax, workers)}
			}
			if leaseTTL < time.Second {
				return usageError{fmt.Errorf("--lease-ttl must be at least 1s, got %s", leaseTTL)}
			}
			if leaderTTL < time.Second {
				return usageError{fmt.Errorf("--leader-lease-ttl must be at least 1s, got %s", leaderTTL)}
			}
			if syncInterval < 0 {
				return usageError{fmt.Errorf("--sync-interval must be 0 (off) or positive, got %s", syncInterval)}
			}
			if poll < 10*time.Millisecond {
				return usageError{fmt.Errorf("--poll-interval must be at least 10ms, got %s", poll)}
			}
			// A daemon says what it deletes at its default level.
			if a.g.logLevel == "" && a.s.Getenv("LETHE_LOG_LEVEL") == "" {
				a.g.logLevel = "info"
			}
			if err := a.init(); err != nil {
				return err
			}
			// A daemon runs every plugin it runs pinned, unless told
			// otherwise (and then says so).
			if !a.g.trust.requireLockSet {
				a.g.trust.requireLock = true
			} else if !a.g.trust.requireLock {
				a.log.Warn("--require-plugin-lock=false: plugins that no lock file pins will run; whoever can write the plugin folder can run code as Lethe")
			}
			fed, err := a.federationConfig()
			if err != nil {
				return err
			}
			// Bind the metrics address (and the peer service's) first: one
			// taken fails here, before any plugin starts or any work is
			// claimed.
			var fedLn net.Listener
			if fed != nil {
				if _, err := federation.ServerTLS(fed); err != nil {
					return err
				}
				if fedLn, err = net.Listen("tcp", fed.Listen); err != nil {
					return fmt.Errorf("federation: listen %s: %w", termtext.Quote(fed.Listen), err)
				}
				defer fedLn.Close()
			}
			var ln net.Listener
			if metrics != "" {
				if ln, err = server.Listen(metrics); err != nil {
					return err
				}
				defer ln.Close()
			}
			var apiLn net.Listener
			if apiListen.Addr != "" {
				var err error
				if apiLn, err = api.Listen(apiListen); err != nil {
					return usageError{err}
				}
				defer apiLn.Close()
			} else if apiListen.CertFile != "" || apiListen.KeyFile != "" {
				return usageError{errors.New("--api-tls-cert and --api-tls-key need --api-addr")}
			}
			a.leaseTTL = leaseTTL
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
			col, err := a.collectorWith(ctx, del, deletion.Options{NoPlugins: noPlugins, Unattended: true})
			if err != nil {
				return err
			}
			host := a.host
			enforcer, ttlVeto, err := a.retentionLoop(del, retentionInterval)
			if err != nil {
				return err
			}
			syncFn, err := a.serverSync(ctx)
			if err != nil {
				return err
			}
			var loops []server.Loop
			var fedMetrics *federation.Metrics
			if fed != nil {
				fedMetrics = federation.NewMetrics(fed, a.store)
				loops = a.federationLoops(fed, fedLn, del.Holder(), time.Second, fedMetrics)
			}
			var apiHandler http.Handler
			if apiLn != nil {
				q, err := a.retryQueue(ctx)
				if err != nil {
					return err
				}
				if apiHandler, err = api.New(&api.Config{Store: a.store, Logger: a.log.Named("api"), Deleter: del, Retry: q,
					DefaultDelay: a.g.defaultDelayD, NoPlugins: noPlugins, TLS: apiListen.CertFile != "",
					Plugins: a.host.Plugins, Locations: a.locations, LocationSet: a.g.locs.set}); err != nil {
					return err
				}
			}
			srv, err := server.New(&server.Config{
				APIListener: apiLn, APIHandler: apiHandler,
				LeaderLoops: []server.Loop{enforcer}, TTLVeto: ttlVeto, Loops: loops,
				Sync: syncFn, SyncInterval: syncInterval,
				Store: a.store, Deleter: del, Collector: col, Logger: a.log, Workers: workers,
				MetricsListener: ln, DefaultDelay: a.g.defaultDelayD, NoPlugins: noPlugins,
				NotifyWebhooks: a.g.retry.notify,
				LeaseTTL:       leaseTTL, LeaderTTL: leaderTTL, PollInterval: poll,
				Plugins: func() int { return len(host.Plugins()) },
				PluginStats: func() map[string]server.PluginCounts {
					out := map[string]server.PluginCounts{}
					for _, p := range host.Plugins() {
						out[p.Name] = server.PluginCounts{} // every plugin, zero until something happens
					}
					for k, v := range host.Stats() {
						out[k] = server.PluginCounts{Restarts: v.Restarts, Timeouts: v.Timeouts}
					}
					return out
				},
			})
			if err != nil {
				return err
			}
			if fedMetrics != nil {
				if err := srv.Registry().Register(fedMetrics); err != nil {
					return err
				}
			}
			fmt.Fprintf(a.s.Err, "lethe server: catalog %s, storage %s, %s, version %s, holder %q; Ctrl-C to stop\n",
				termtext.Quote(catalog.RedactURL(a.g.store)), termtext.Quote(a.blobs.URL()), counted(len(a.host.Plugins()), "plugin", "plugins"), Version, del.Holder())
			if fed != nil {
				fmt.Fprintf(a.s.Err, "lethe server: peer %s, peer service on %s, %s\n", termtext.Quote(fed.Name), fedLn.Addr(), counted(len(fed.Peers), "peer", "peers"))
			}
			return srv.Run(ctx)
		},
	}
	f := c.Flags()
	f.DurationVar(&retentionInterval, "retention-interval", planner.IntervalDefault, "how often enforced RetentionPolicies are evaluated when nothing changes; also the pace of one that maxDeletesPerRun holds back (env LETHE_RETENTION_INTERVAL)")
	f.IntVar(&workers, "workers", server.WorkersDefault, "deletions this replica runs at once, 1 to 256 (env LETHE_WORKERS)")
	f.StringVar(&apiListen.Addr, "api-addr", "", "serve the HTTP API (/api/v1/) and the console on this address, e.g. 127.0.0.1:8443; a port alone (:8443) is loopback; any other host needs --api-tls-cert and --api-tls-key (docs/api.md) (env LETHE_API_ADDR)")
	f.StringVar(&apiListen.CertFile, "api-tls-cert", "", "serve the API over TLS with this certificate `FILE` (PEM; with --api-tls-key) (env LETHE_API_TLS_CERT)")
	f.StringVar(&apiListen.KeyFile, "api-tls-key", "", "the private key `FILE` of --api-tls-cert (PEM) (env LETHE_API_TLS_KEY)")
	f.StringVar(&metrics, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (env LETHE_METRICS_ADDR)")
	f.BoolVar(&noPlugins, "no-plugins", false, "run deletions with no plugin installed at all (audited on each purge) (env LETHE_NO_PLUGINS)")
	f.DurationVar(&leaseTTL, "lease-ttl", deletion.LeaseTTLDefault, "deletion lease: a replica that dies holding a deletion loses it after this long (env LETHE_LEASE_TTL)")
	f.DurationVar(&leaderTTL, "leader-lease-ttl", leader.TTLDefault, "leader lease: a killed leader is replaced after this long; a stopped one at once (env LETHE_LEADER_LEASE_TTL)")
	f.DurationVar(&syncInterval, "sync-interval", server.SyncIntervalDefault, "the leader imports new backups from storage (and re-reads Velero's phases) this often, as Velero's --backup-sync-period; 0 turns it off (env LETHE_SYNC_INTERVAL)")
	f.DurationVar(&poll, "poll-interval", server.PollIntervalDefault, "safety-net poll of idle workers; wake-ups and due times normally wake them (env LETHE_POLL_INTERVAL)")
	return c
}
