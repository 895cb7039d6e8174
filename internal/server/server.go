// Package server wires the daemon (`lethe server`): the TTL controller,
// the grace-window timers, and workers that claim backup deletions from the
// catalog's work queue and run them. Several servers may share one
// PostgreSQL catalog; leases keep them from running the same deletion.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/softdelete"
	"github.com/lethehq/lethe/internal/ttl"
)

// Defaults.
const (
	PollIntervalDefault = time.Second
	WorkersDefault      = 2
)

// Catalog is the part of the catalog a Server uses, its own and that of
// the soft-delete timers and the TTL controller it runs.
type Catalog interface {
	catalog.Resources
	catalog.Lifecycle
	catalog.WorkQueue
	catalog.Feed
}

// Config configures a Server.
type Config struct {
	Store   Catalog
	Deleter *deletion.Deleter
	Logger  hclog.Logger
	Now     func() time.Time
	// Workers is how many deletions run at once.
	Workers int
	// PollInterval is how often idle workers look for queued deletions.
	PollInterval time.Duration
	// LeaseTTL is the deletion lease (see deletion.Config).
	LeaseTTL time.Duration
	// MetricsAddr serves Prometheus metrics on /metrics when set; it is
	// bound before any work starts. MetricsListener, when set, is used
	// instead (the CLI binds it before it even starts the plugins).
	MetricsAddr     string
	MetricsListener net.Listener
	// DefaultDelay is the grace window for expired backups without a
	// deletion-delay annotation.
	DefaultDelay time.Duration
	// NoPlugins: the operator said running with no plugin installed is
	// intended (see deletion.Options.NoPlugins); audited on each purge.
	NoPlugins bool
	// NotifySecret signs webhook notifications (see retry.Notifier);
	// without it no notifier runs, and webhooks are refused.
	NotifySecret  []byte
	NotifyTimeout time.Duration
	// RetryLeaseTTL is the lease on claimed retry rows.
	RetryLeaseTTL time.Duration
	// Collector, when set, is the garbage collector, run from the change
	// feed (see gc.go).
	Collector *gc.Collector
}

// Server is the daemon.
type Server struct {
	cfg Config
	log hclog.Logger
	reg *prometheus.Registry

	deletions *prometheus.CounterVec
	expired   prometheus.Counter
	// pluginMissing counts the backups whose deletion this server
	// refuses because an expected plugin is missing (refused, by UID).
	pluginMissing prometheus.Gauge
	refusedMu     sync.Mutex
	refused       map[string]bool
	retryMetrics  *retry.Metrics
}

// New returns a Server.
func New(cfg *Config) (*Server, error) {
	c := *cfg
	if c.Store == nil || c.Deleter == nil {
		return nil, errors.New("server: Config.Store and Config.Deleter are required")
	}
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, deletion.LeaseTTLDefault)
	s := &Server{cfg: c, log: c.Logger.Named("server"), reg: prometheus.NewRegistry(), refused: map[string]bool{}}
	s.deletions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lethe_backup_deletions_total", Help: "Backup deletion runs by result (purged, incomplete, parked, error).",
	}, []string{"result"})
	s.expired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lethe_ttl_expired_total", Help: "Deletion requests made because a backup's TTL expired.",
	})
	s.pluginMissing = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lethe_backups_plugin_missing",
		Help: "Backups whose deletion waits because an expected plugin is missing or cannot start (condition PluginMissing).",
	})
	s.retryMetrics = retry.NewMetrics(s.reg)
	s.reg.MustRegister(s.deletions, s.expired, s.pluginMissing, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s, nil
}

// Run serves until ctx ends, then stops every part and waits for it. The
// metrics address is bound before anything else starts: an address in
// use fails Run before any work.
func (s *Server) Run(ctx context.Context) error {
	ctx = catalog.WithActor(ctx, "server:"+s.cfg.Deleter.Holder())
	ln := s.cfg.MetricsListener
	if ln == nil && s.cfg.MetricsAddr != "" {
		var err error
		if ln, err = Listen(s.cfg.MetricsAddr); err != nil {
			return err
		}
	}
	ttlc, err := ttl.New(&ttl.Config{
		Store: s.cfg.Store, Logger: s.cfg.Logger, Now: s.cfg.Now,
		Request: func(ctx context.Context, name string) error {
			s.expired.Inc()
			_, err := s.cfg.Deleter.Delete(catalog.WithActor(ctx, "ttl"), name, deletion.Options{
				Reason: "TTL expired", Async: true, Unattended: true, DefaultDelay: s.cfg.DefaultDelay,
			})
			return err
		},
	})
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return err
	}
	timers, err := softdelete.New(&softdelete.Config{
		Store: s.timersStore(), Logger: s.cfg.Logger, Now: s.cfg.Now,
		Handlers: map[string]softdelete.Handler{
			backup.Kind: func(ctx context.Context, r *catalog.Resource) error {
				_, err := s.cfg.Deleter.Delete(catalog.WithActor(ctx, "softdelete"), r.Name, deletion.Options{
					Reason: "grace window over", Async: true, OnlyIfScheduled: true, Unattended: true,
				})
				return err
			},
		},
	})
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return err
	}

	collector, notifier, err := s.retryParts()
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return err
	}

	// Whatever ends Run, it stops every part it started first.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 7+s.cfg.Workers)
	wg.Go(func() { errs <- ttlc.Run(ctx) })
	wg.Go(func() { errs <- timers.Run(ctx) })
	wg.Go(func() { errs <- collector.Run(ctx) })
	if notifier != nil {
		wg.Go(func() { errs <- notifier.Run(ctx) })
	}
	for range s.cfg.Workers {
		wg.Go(func() { errs <- s.work(ctx) })
	}
	wg.Go(func() { errs <- s.reconcile(ctx) })
	wg.Go(func() { errs <- s.runCollector(ctx) })
	if ln != nil {
		srv := &http.Server{Handler: promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		wg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		})
		wg.Go(func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		})
		s.log.Info("serving metrics", "addr", ln.Addr().String())
	}
	s.log.Info("lethe server started", "workers", s.cfg.Workers)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// Listen binds the metrics address; the error is one line naming it.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	return ln, nil
}

// ReconcileInterval is how often the server makes sure every Deleting
// backup has a queued work item.
const ReconcileInterval = 15 * time.Minute

// reconcile queues a work item for every backup in Deleting, at start and
// then now and again: moving a backup to Deleting and queueing its work are
// two writes, and a crash between them must not strand the deletion.
// Enqueue is idempotent, so a backup that already has its item is untouched.
func (s *Server) reconcile(ctx context.Context) error {
	for {
		if err := s.enqueueDeleting(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("queueing deletions in progress", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(ReconcileInterval):
		}
	}
}

func (s *Server) enqueueDeleting(ctx context.Context) error {
	opts := catalog.ListOptions{Kind: backup.Kind, Phase: catalog.PhaseDeleting}
	for {
		page, err := s.cfg.Store.List(ctx, opts)
		if err != nil {
			return err
		}
		for _, r := range page.Items {
			if _, err := s.cfg.Store.Enqueue(ctx, catalog.WorkItem{Queue: deletion.Queue, Key: r.UID, RunAt: s.cfg.Now()}); err != nil {
				return err
			}
		}
		if page.Continue == "" {
			return nil
		}
		opts.Continue = page.Continue
	}
}

// notePluginMissing keeps the plugin-missing gauge: a backup counts from
// the refusal of its deletion until a run of it gets past the check.
func (s *Server) notePluginMissing(uid string, err error) {
	var missing *deletion.MissingPluginsError
	refused := errors.As(err, &missing) || errors.Is(err, deletion.ErrNoPlugins)
	s.refusedMu.Lock()
	defer s.refusedMu.Unlock()
	if refused {
		s.refused[uid] = true
	} else {
		delete(s.refused, uid)
	}
	s.pluginMissing.Set(float64(len(s.refused)))
}

// work claims queued deletions and runs them, one at a time.
func (s *Server) work(ctx context.Context) error {
	for ctx.Err() == nil {
		items, err := s.cfg.Store.Claim(ctx, deletion.Queue, s.cfg.Deleter.Holder(), s.cfg.LeaseTTL, 1)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Error("claiming deletions", "error", err)
		}
		for _, w := range items {
			rep, err := s.cfg.Deleter.RunWork(ctx, w, deletion.Options{NoPlugins: s.cfg.NoPlugins, Unattended: true})
			s.notePluginMissing(w.Key, err)
			var missing *deletion.MissingPluginsError
			switch {
			case errors.Is(err, deletion.ErrTarballMissing) || errors.Is(err, deletion.ErrTarballReplaced):
				// The deleter raised it once (a condition and a warning)
				// and parked the work until an operator acts.
				s.deletions.WithLabelValues("parked").Inc()
				s.log.Info("deletion parked until an operator acts", "uid", w.Key, "error", err)
			case errors.As(err, &missing) || errors.Is(err, deletion.ErrNoPlugins):
				// Never purged without its plugins: the deletion stays,
				// with the PluginMissing condition, and is looked at again.
				s.deletions.WithLabelValues("plugin-missing").Inc()
				s.log.Error("deletion refused: plugins missing", "uid", w.Key, "error", err)
			case err != nil:
				s.deletions.WithLabelValues("error").Inc()
				if ctx.Err() == nil {
					s.log.Error("deletion failed", "uid", w.Key, "error", err)
				}
			case rep != nil:
				s.deletions.WithLabelValues(string(rep.Result)).Inc()
				s.log.Info("deletion ran", "backup", rep.Backup, "result", rep.Result, "unsettled", rep.UnsettledCount)
			}
		}
		if len(items) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(s.cfg.PollInterval):
			}
		}
	}
	return nil
}
