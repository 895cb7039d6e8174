// Package server wires the daemon (`lethe server`): the TTL controller,
// the grace-window timers, and workers that claim backup deletions from the
// catalog's work queue and run them. Several servers may share one
// PostgreSQL catalog; leases keep them from running the same deletion.
package server

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/softdelete"
	"github.com/lethehq/lethe/internal/ttl"
)

// Defaults.
const (
	PollIntervalDefault = time.Second
	WorkersDefault      = 2
)

// Config configures a Server.
type Config struct {
	Store   catalog.Store
	Deleter *deletion.Deleter
	Logger  hclog.Logger
	Now     func() time.Time
	// Workers is how many deletions run at once.
	Workers int
	// PollInterval is how often idle workers look for queued deletions.
	PollInterval time.Duration
	// LeaseTTL is the deletion lease (see deletion.Config).
	LeaseTTL time.Duration
	// MetricsAddr serves Prometheus metrics on /metrics when set.
	MetricsAddr string
	// DefaultDelay is the grace window for expired backups without a
	// deletion-delay annotation.
	DefaultDelay time.Duration
}

// Server is the daemon.
type Server struct {
	cfg Config
	log hclog.Logger
	reg *prometheus.Registry

	deletions *prometheus.CounterVec
	expired   prometheus.Counter
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
	s := &Server{cfg: c, log: c.Logger.Named("server"), reg: prometheus.NewRegistry()}
	s.deletions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lethe_backup_deletions_total", Help: "Backup deletion runs by result (purged, incomplete, error).",
	}, []string{"result"})
	s.expired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lethe_ttl_expired_total", Help: "Deletion requests made because a backup's TTL expired.",
	})
	s.reg.MustRegister(s.deletions, s.expired, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return s, nil
}

// Run serves until ctx ends, then stops every part and waits for it.
func (s *Server) Run(ctx context.Context) error {
	ctx = catalog.WithActor(ctx, "server:"+s.cfg.Deleter.Holder())
	ttlc, err := ttl.New(&ttl.Config{
		Store: s.cfg.Store, Logger: s.cfg.Logger, Now: s.cfg.Now,
		Request: func(ctx context.Context, name string) error {
			s.expired.Inc()
			_, err := s.cfg.Deleter.Delete(ctx, name, deletion.Options{
				Actor: "ttl", Reason: "TTL expired", Async: true, DefaultDelay: s.cfg.DefaultDelay,
			})
			return err
		},
	})
	if err != nil {
		return err
	}
	timers, err := softdelete.New(&softdelete.Config{
		Store: s.cfg.Store, Logger: s.cfg.Logger, Now: s.cfg.Now,
		Handlers: map[string]softdelete.Handler{
			backup.Kind: func(ctx context.Context, r *catalog.Resource) error {
				_, err := s.cfg.Deleter.Delete(ctx, r.Name, deletion.Options{
					Actor: "softdelete", Reason: "grace window over", Async: true, OnlyIfScheduled: true,
				})
				return err
			},
		},
	})
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	errs := make(chan error, 4+s.cfg.Workers)
	wg.Go(func() { errs <- ttlc.Run(ctx) })
	wg.Go(func() { errs <- timers.Run(ctx) })
	for range s.cfg.Workers {
		wg.Go(func() { errs <- s.work(ctx) })
	}
	wg.Go(func() { errs <- s.reconcile(ctx) })
	if s.cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", s.cfg.MetricsAddr)
		if err != nil {
			return err
		}
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
			rep, err := s.cfg.Deleter.RunWork(ctx, w, deletion.Options{Actor: catalog.ActorFrom(ctx)})
			switch {
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
