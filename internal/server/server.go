// Package server wires the daemon (`lethe server`). Several servers may
// share one PostgreSQL catalog:
//
//   - every replica runs workers that claim queued deletions with leases
//     (the catalog's work queue), so work spreads across replicas and two
//     never run the same deletion at once;
//   - one elected leader (internal/leader, a lease in the catalog) runs the
//     singleton loops: TTL expiry, the grace-window timers, and the
//     reconciliation that requeues stranded deletions. They run with a
//     context fenced by the leader's term (catalog.WithLeaderFence), so the
//     catalog refuses their writes once another replica leads;
//   - idle replicas sleep until the next item is due and are woken at once
//     by the catalog's wake-up hints (LISTEN/NOTIFY on PostgreSQL); a slow
//     poll is only the safety net.
//
// Other engines hook in through Config.LeaderLoops (singletons) and
// Config.Loops (every replica). The HTTP side serves /metrics, /healthz
// and /readyz on one address, bound before any work starts.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/leader"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/softdelete"
	"github.com/lethehq/lethe/internal/ttl"
)

// Defaults.
const (
	// PollIntervalDefault is the safety-net poll of idle workers: they
	// otherwise sleep until the next item is due or a wake-up arrives.
	PollIntervalDefault = 10 * time.Second
	WorkersDefault      = 2
	// WorkersMax bounds Workers: each worker holds a deletion, its plugin
	// sessions and its catalog connections.
	WorkersMax = 256
)

// Catalog is the part of the catalog a Server uses, its own and that of
// the soft-delete timers, the TTL controller and the elector it runs.
type Catalog interface {
	catalog.Resources
	catalog.Lifecycle
	catalog.WorkQueue
	catalog.Feed
	catalog.Progress
	catalog.Leadership
	catalog.Wake
	catalog.Counts
}

// Loop is a long-running part of the server. Run works until ctx ends and
// returns nil then. A Loop that returns before ctx ends, with an error or
// without, is logged, counted in lethe_loop_restarts_total and run again
// after a backoff (1 s doubling to 30 s): a transient catalog error (a
// PostgreSQL restart, a deadlock victim, a dropped LISTEN connection) must
// not take a replica of the fleet down with it.
type Loop struct {
	Name string
	Run  func(ctx context.Context) error
}

// PluginStats reports restarts and timeouts by plugin (pluginhost.Host).
type PluginStats func() map[string]PluginCounts

// PluginCounts is one plugin's counters.
type PluginCounts struct{ Restarts, Timeouts int64 }

// Config configures a Server.
type Config struct {
	Store   Catalog
	Deleter *deletion.Deleter
	Logger  hclog.Logger
	Now     func() time.Time
	// Workers is how many deletions run at once in this replica.
	Workers int
	// PollInterval is the safety-net poll of idle workers.
	PollInterval time.Duration
	// LeaseTTL is the deletion lease (see deletion.Config).
	LeaseTTL time.Duration
	// LeaderTTL is the leader lease (see leader.Config).
	LeaderTTL time.Duration
	// MetricsAddr serves /metrics, /healthz and /readyz when set; it is
	// bound before any work starts. MetricsListener, when set, is used
	// instead (the CLI binds it before it even starts the plugins).
	MetricsAddr     string
	MetricsListener net.Listener
	// APIListener, when set, serves APIHandler (the HTTP API and the
	// console, internal/api) with /healthz and /readyz. The CLI binds it
	// (with TLS when given certificates) before any work starts.
	APIListener net.Listener
	APIHandler  http.Handler
	// DefaultDelay is the grace window for expired backups without a
	// deletion-delay annotation.
	DefaultDelay time.Duration
	// NoPlugins: the operator said running with no plugin installed is
	// intended (see deletion.Options.NoPlugins); audited on each purge.
	NoPlugins bool
	// Plugins counts the plugins loaded (for /readyz); nil: not checked.
	Plugins func() int
	// PluginStats feeds the plugin restart and timeout metrics.
	PluginStats PluginStats
	// LeaderLoops run only on the elected leader, LoopsAll on every
	// replica, next to the server's own.
	LeaderLoops []Loop
	Loops       []Loop
	// NotifyWebhooks are the webhooks the notifier may send to, each
	// with its secret (see retry.Notifier); without them no notifier
	// runs. Every webhook the queue writes to must be among them.
	NotifyWebhooks []retry.Webhook
	NotifyTimeout  time.Duration
	// RetryLeaseTTL is the lease on claimed retry rows.
	RetryLeaseTTL time.Duration
	// Collector, when set, is the garbage collector, run from the change
	// feed on every replica (its work is leased; see gc.go).
	Collector *gc.Collector
	// TTLVeto, when set, is asked before an expired backup's deletion is
	// requested: a non-empty answer (a RetentionPolicy with overrideTTL
	// that selects it) leaves the backup to that policy.
	TTLVeto func(ctx context.Context, backup string) (string, error)
	// Sync, when set with a positive SyncInterval, syncs storage on the
	// leader every SyncInterval (see sync.go).
	Sync         SyncFunc
	SyncInterval time.Duration
}

// Server is the daemon.
type Server struct {
	cfg     Config
	log     hclog.Logger
	reg     *prometheus.Registry
	m       *metrics
	elector *leader.Elector

	// pluginMissing: the backups whose deletion this server refuses
	// because an expected plugin is missing (refused, by UID).
	refusedMu sync.Mutex
	refused   map[string]bool

	wakeMu  sync.Mutex
	wakeChs map[string]chan struct{}
	leaderW chan struct{}
	started atomic.Bool

	retryMetrics *retry.Metrics
	syncM        *syncMetrics
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
	c.LeaderTTL = cmp.Or(c.LeaderTTL, leader.TTLDefault)
	if c.Workers < 1 || c.Workers > WorkersMax {
		return nil, fmt.Errorf("server: Workers must be between 1 and %d, got %d", WorkersMax, c.Workers)
	}
	s := &Server{cfg: c, log: c.Logger.Named("server"), reg: prometheus.NewRegistry(), refused: map[string]bool{},
		wakeChs: map[string]chan struct{}{}, leaderW: make(chan struct{}, 1)}
	el, err := leader.New(&leader.Config{
		Store: c.Store, Holder: c.Deleter.Holder(), TTL: c.LeaderTTL, Logger: c.Logger, Now: c.Now, Wake: s.leaderW,
		OnChange: func(leading, tookOver bool, l *catalog.LeaderLease) {
			s.m.leader.Set(b2f(leading))
			if leading {
				s.m.leaderTerm.Set(float64(l.Term))
				s.m.leaderChanges.Inc()
				if tookOver {
					s.m.takeovers.WithLabelValues("leader").Inc()
				}
			}
		},
	})
	if err != nil {
		return nil, err
	}
	s.elector = el
	s.m = newMetrics(s)
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.m.register(s.reg)
	s.retryMetrics = retry.NewMetrics(s.reg)
	s.syncM = newSyncMetrics(s.reg)
	c.Deleter.OnTakeover(s.tookOver)
	return s, nil
}

// tookOver counts a claim of a deletion whose lease another holder (a
// dead or stalled replica) let expire.
func (s *Server) tookOver(w *catalog.WorkItem) {
	s.m.takeovers.WithLabelValues("deletion").Inc()
	s.log.Warn("took over the lease of a deletion", "uid", w.Key, "from", w.TakenOverFrom, "epoch", w.Epoch)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Leading reports whether this replica is the elected leader now.
func (s *Server) Leading() bool { return s.elector.Leading() }

// Registry is the server's Prometheus registry: other engines register
// their collectors here before Run.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Wake returns a channel closed by the next wake-up hint for queue (work
// enqueued or released, here or on another replica). Call it again after
// each wake-up.
func (s *Server) Wake(queue string) <-chan struct{} {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	ch, ok := s.wakeChs[queue]
	if !ok {
		ch = make(chan struct{})
		s.wakeChs[queue] = ch
	}
	return ch
}

// wake fires the hint for queue, or for every queue when queue is "".
func (s *Server) wake(queue string) {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	for q, ch := range s.wakeChs {
		if queue == "" || q == queue {
			close(ch)
			delete(s.wakeChs, q)
		}
	}
}

// Run serves until ctx ends, then stops every part and waits for it. The
// metrics address is bound before anything else starts: an address in
// use fails Run before any work.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("server: Run called twice")
	}
	ctx = catalog.WithActor(ctx, "server:"+s.cfg.Deleter.Holder())
	ln := s.cfg.MetricsListener
	if ln == nil && s.cfg.MetricsAddr != "" {
		var err error
		if ln, err = Listen(s.cfg.MetricsAddr); err != nil {
			return err
		}
	}
	closeLn := func() {
		if ln != nil {
			_ = ln.Close()
		}
	}
	leaderLoops, err := s.leaderLoops()
	if err != nil {
		closeLn()
		return err
	}
	leaderLoops = append(leaderLoops, s.cfg.LeaderLoops...)
	retryCollector, notifier, err := s.retryParts()
	if err != nil {
		closeLn()
		return err
	}
	// The retry queue, its notifications and the garbage collector run on
	// every replica: their rows and work items are claimed with leases.
	loops := append([]Loop{{Name: "retry queue", Run: retryCollector.Run}, {Name: "garbage collector", Run: s.runCollector}}, s.cfg.Loops...)
	if notifier != nil {
		loops = append(loops, Loop{Name: "notifications", Run: notifier.Run})
	}
	wakeups, err := s.cfg.Store.Wakeups(ctx)
	if err != nil {
		closeLn()
		return fmt.Errorf("subscribing to wake-ups: %w", err)
	}

	// Whatever ends Run, it stops every part it started first.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 8+s.cfg.Workers+len(loops)+len(leaderLoops))
	run := func(l Loop) {
		wg.Go(func() { s.supervise(ctx, l) })
	}
	wg.Go(func() {
		defer wakeups.Close()
		s.dispatchWakeups(ctx, wakeups)
	})
	for i := range s.cfg.Workers {
		run(Loop{Name: fmt.Sprintf("worker %d", i), Run: s.work})
	}
	for _, l := range loops {
		run(l)
	}
	wg.Go(func() {
		_ = s.elector.Run(ctx, func(lctx context.Context) {
			s.runLeaderLoops(lctx, leaderLoops)
		})
	})
	if ln != nil {
		s.serveHTTP(ctx, &wg, ln, s.Handler(), errs)
		s.log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	}
	if s.cfg.APIListener != nil {
		s.serveHTTP(ctx, &wg, s.cfg.APIListener, s.apiHandler(), errs)
		s.log.Info("serving the API (/api/v1/) and the console", "addr", s.cfg.APIListener.Addr().String())
	}
	s.log.Info("lethe server started", "workers", s.cfg.Workers, "holder", s.cfg.Deleter.Holder())
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	s.log.Info("lethe server stopped")
	return errors.Join(all...)
}

// runLeaderLoops runs the leader's loops until lctx ends (leadership lost
// or the server stopping) and waits for all of them.
func (s *Server) runLeaderLoops(lctx context.Context, loops []Loop) {
	log := s.log
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Go(func() { s.supervise(lctx, l) })
	}
	names := make([]string, len(loops))
	for i, l := range loops {
		names[i] = l.Name
	}
	log.Info("running the leader's loops", "loops", strings.Join(names, ", "))
	wg.Wait()
}

// Loop restart backoff: the first restart waits loopBackoffMin, each
// following one twice as long up to loopBackoffMax; a run that lasted
// loopHealthy starts the count again.
const (
	loopBackoffMin = time.Second
	loopBackoffMax = 30 * time.Second
	loopHealthy    = time.Minute
)

// supervise runs l until ctx ends, restarting it (see Loop) when it
// returns early.
func (s *Server) supervise(ctx context.Context, l Loop) {
	backoff := loopBackoffMin
	for {
		began := time.Now()
		err := l.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) >= loopHealthy {
			backoff = loopBackoffMin
		}
		s.m.loopRestarts.WithLabelValues(l.Name).Inc()
		if err != nil {
			s.log.Error("a loop failed; restarting it", "loop", l.Name, "error", err, "in", backoff)
		} else {
			s.log.Warn("a loop returned early; restarting it", "loop", l.Name, "in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, loopBackoffMax)
	}
}

// leaderLoops are the server's own singletons: TTL expiry, the
// grace-window timers and the reconciliation of stranded deletions.
func (s *Server) leaderLoops() ([]Loop, error) {
	ttlc, err := ttl.New(&ttl.Config{
		Store: s.cfg.Store, Logger: s.cfg.Logger, Now: s.cfg.Now,
		Request: func(ctx context.Context, name string) error {
			if s.cfg.TTLVeto != nil {
				if who, err := s.cfg.TTLVeto(ctx, name); err != nil || who != "" {
					s.log.Debug("TTL expired, but a retention policy decides for this backup", "backup", name, "policy", who, "error", err)
					return err
				}
			}
			s.m.expired.Inc()
			s.log.Info("TTL expired: requesting the deletion", "backup", name)
			_, err := s.cfg.Deleter.Delete(catalog.WithActor(ctx, "ttl"), name, deletion.Options{
				Reason: "TTL expired", Async: true, Unattended: true, DefaultDelay: s.cfg.DefaultDelay,
			})
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	timers, err := softdelete.New(&softdelete.Config{
		Store: s.timersStore(), Logger: s.cfg.Logger, Now: s.cfg.Now,
		Handlers: map[string]softdelete.Handler{
			backup.Kind: func(ctx context.Context, r *catalog.Resource) error {
				s.log.Info("grace window over: queueing the deletion", "backup", r.Name)
				_, err := s.cfg.Deleter.Delete(catalog.WithActor(ctx, "softdelete"), r.Name, deletion.Options{
					Reason: "grace window over", Async: true, OnlyIfScheduled: true, Unattended: true,
				})
				return err
			},
		},
	})
	if err != nil {
		return nil, err
	}
	loops := []Loop{
		{Name: "ttl", Run: ttlc.Run},
		{Name: "grace-window timers", Run: timers.Run},
		{Name: "reconcile", Run: s.reconcile},
	}
	if s.cfg.Sync != nil && s.cfg.SyncInterval > 0 {
		loops = append(loops, Loop{Name: "storage sync", Run: s.syncLoop})
	}
	return loops, nil
}

func (s *Server) dispatchWakeups(ctx context.Context, w catalog.Wakeups) {
	for {
		select {
		case <-ctx.Done():
			return
		case topic, ok := <-w.C():
			if !ok {
				return
			}
			switch {
			case topic == "":
				s.wake("")
				s.wakeLeader()
			case strings.HasPrefix(topic, catalog.WakeTopicLeaderPrefix):
				s.wakeLeader()
			default:
				s.wake(topic)
			}
		}
	}
}

func (s *Server) wakeLeader() {
	select {
	case s.leaderW <- struct{}{}:
	default:
	}
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

// ReconcileInterval is how often the leader makes sure every Deleting
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
	s.m.pluginMissing.Set(float64(len(s.refused)))
}

// work claims queued deletions and runs them, one at a time. Idle, it
// sleeps until the queue's next item is due (a retry's run time, or the
// expiry of a lease another replica holds), a wake-up arrives, or the
// safety-net poll.
func (s *Server) work(ctx context.Context) error {
	for ctx.Err() == nil {
		wake := s.Wake(deletion.Queue) // before the claim: a hint after it is not lost
		items, err := s.cfg.Store.Claim(ctx, deletion.Queue, s.cfg.Deleter.Holder(), s.cfg.LeaseTTL, 1)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Error("claiming deletions", "error", err)
		}
		for _, w := range items {
			if w.TakenOverFrom != "" {
				s.tookOver(w)
			}
			s.runOne(ctx, w)
		}
		if len(items) > 0 {
			continue
		}
		wait := s.cfg.PollInterval
		if next, ok, err := s.cfg.Store.NextAvailable(ctx, deletion.Queue); err == nil && ok {
			wait = min(wait, max(next.Sub(s.cfg.Now()), 10*time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// runOne runs one claimed deletion, with a log line at its start and one
// at its end, and the metrics.
func (s *Server) runOne(ctx context.Context, w *catalog.WorkItem) {
	name := w.Key
	if r, err := s.cfg.Store.GetByUID(ctx, w.Key); err == nil {
		name = r.Name
	}
	before := map[string]catalog.OutcomeCount{}
	if p, _, err := s.cfg.Store.LoadProgress(ctx, w.Key); err == nil {
		before = p.Counts
	}
	start := time.Now()
	s.log.Info("deletion started", "backup", name, "uid", w.Key, "attempt", w.Attempts, "epoch", w.Epoch)
	s.m.inFlight.Inc()
	rep, err := s.cfg.Deleter.RunWork(ctx, w, deletion.Options{NoPlugins: s.cfg.NoPlugins, Unattended: true})
	s.m.inFlight.Dec()
	took := time.Since(start).Round(time.Millisecond)
	s.notePluginMissing(w.Key, err)
	if rep != nil {
		s.m.countItems(before, rep.Counts)
	}
	var missing *deletion.MissingPluginsError
	switch {
	case errors.Is(err, deletion.ErrTarballMissing) || errors.Is(err, deletion.ErrTarballReplaced):
		// The deleter raised it once (a condition and a warning) and
		// parked the work until an operator acts.
		s.m.deletions.WithLabelValues("parked").Inc()
		s.log.Info("deletion ended: parked until an operator acts", "backup", name, "uid", w.Key, "duration", took, "error", err)
	case errors.Is(err, blobstore.ErrUnavailable):
		// Unknown is not absent: parked (condition LocationUnavailable),
		// nothing charged, looked at again until the location is back.
		s.m.deletions.WithLabelValues("parked").Inc()
		s.log.Warn("deletion parked: its storage location is unavailable", "backup", name, "uid", w.Key, "duration", took, "error", err)
	case errors.As(err, &missing) || errors.Is(err, deletion.ErrNoPlugins):
		// Never purged without its plugins: the deletion stays, with the
		// PluginMissing condition, and is looked at again.
		s.m.deletions.WithLabelValues("plugin-missing").Inc()
		s.log.Error("deletion ended: refused, plugins missing", "backup", name, "uid", w.Key, "duration", took, "error", err)
	case err != nil && ctx.Err() != nil:
		s.m.deletions.WithLabelValues("interrupted").Inc()
		s.log.Info("deletion ended: interrupted by the stop; it resumes from its checkpoint", "backup", name, "uid", w.Key, "duration", took)
	case err != nil:
		s.m.deletions.WithLabelValues("error").Inc()
		s.log.Error("deletion ended: failed", "backup", name, "uid", w.Key, "duration", took, "error", err)
	case rep != nil:
		s.m.deletions.WithLabelValues(string(rep.Result)).Inc()
		args := []any{"backup", name, "uid", w.Key, "result", rep.Result, "duration", took, "items", rep.TotalItems,
			"unsettled", rep.UnsettledCount}
		for _, p := range sortedKeys(rep.Counts) {
			c := rep.Counts[p]
			args = append(args, "plugin."+p, fmt.Sprintf("done=%d skipped=%d failed=%d blocked=%d", c.Done, c.Skipped, c.Failed, c.Blocked))
		}
		if len(rep.Purged) > 0 {
			args = append(args, "purged", strings.Join(rep.Purged, ", "))
		}
		s.log.Info("deletion ended", args...)
	}
}
