package server

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
)

// metrics are the server's Prometheus metrics; each is documented in the
// README's metrics table.
type metrics struct {
	deletions     *prometheus.CounterVec
	expired       prometheus.Counter
	pluginMissing prometheus.Gauge
	inFlight      prometheus.Gauge
	items         *prometheus.CounterVec
	leader        prometheus.Gauge
	leaderTerm    prometheus.Gauge
	leaderChanges prometheus.Counter
	takeovers     *prometheus.CounterVec
	loopRestarts  *prometheus.CounterVec
	catalog       *catalogCollector
	plugins       *pluginCollector
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		deletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lethe_backup_deletions_total",
			Help: "Backup deletion runs by result (purged, incomplete, parked, plugin-missing, interrupted, error).",
		}, []string{"result"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lethe_ttl_expired_total", Help: "Deletion requests made because a backup's TTL expired (leader only).",
		}),
		pluginMissing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lethe_backups_plugin_missing",
			Help: "Backups whose deletion waits because an expected plugin is missing or cannot start (condition PluginMissing).",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lethe_deletions_in_flight", Help: "Deletions this replica is running now.",
		}),
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lethe_plugin_items_total",
			Help: "Items settled by this replica's deletion runs, by plugin and outcome (done, skipped, failed, blocked).",
		}, []string{"plugin", "outcome"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lethe_leader", Help: "1 while this replica is the elected leader (runs TTL expiry and the grace-window timers), else 0.",
		}),
		leaderTerm: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lethe_leader_term", Help: "The leader lease's term when this replica last became leader.",
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lethe_leader_elections_total", Help: "Times this replica became the leader.",
		}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lethe_lease_takeovers_total",
			Help: "Leases this replica took over after their holder (a dead or stalled replica) let them expire without resigning or releasing them: lease=leader, or lease=deletion (one backup's deletion).",
		}, []string{"lease"}),
		loopRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lethe_loop_restarts_total",
			Help: "Times one of the server's loops (a worker, the retry queue, the garbage collector, TTL expiry, the grace-window timers...) failed or returned early and was restarted after a backoff.",
		}, []string{"loop"}),
		catalog: &catalogCollector{s: s},
		plugins: &pluginCollector{s: s},
	}
	m.takeovers.WithLabelValues("leader")
	m.takeovers.WithLabelValues("deletion")
	for _, r := range []string{"purged", "incomplete", "error"} {
		m.deletions.WithLabelValues(r)
	}
	return m
}

func (m *metrics) register(r *prometheus.Registry) {
	r.MustRegister(m.deletions, m.expired, m.pluginMissing, m.inFlight, m.items, m.leader, m.leaderTerm,
		m.leaderChanges, m.takeovers, m.loopRestarts, m.catalog, m.plugins)
}

// countItems adds what one run settled: the progress counts after it less
// those before it.
func (m *metrics) countItems(before, after map[string]catalog.OutcomeCount) {
	for p, a := range after {
		b := before[p]
		for outcome, d := range map[string]int64{
			"done": a.Done - b.Done, "skipped": a.Skipped - b.Skipped, "failed": a.Failed - b.Failed, "blocked": a.Blocked - b.Blocked,
		} {
			if d > 0 {
				m.items.WithLabelValues(p, outcome).Add(float64(d))
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// catalogCollector reads the catalog at scrape time (two aggregate
// queries, at most every cacheFor): backups by phase and the deletion
// queue by state.
type catalogCollector struct {
	s      *Server
	mu     sync.Mutex
	at     time.Time
	phases map[catalog.Phase]int64
	work   catalog.WorkCounts
	ok     bool
}

var (
	backupsDesc = prometheus.NewDesc("lethe_backups", "Backups in the catalog by phase (Active, Scheduled, Deleting).", []string{"phase"}, nil)
	workDesc    = prometheus.NewDesc("lethe_work_items",
		"Queued work items by queue and state: due (claimable now), leased (running), waiting (a retry's backoff, or parked). retried: claimed more than once.",
		[]string{"queue", "state"}, nil)
	catalogUpDesc = prometheus.NewDesc("lethe_catalog_up", "1 if the last read of the catalog for these metrics succeeded.", nil, nil)
	restartsDesc  = prometheus.NewDesc("lethe_plugin_restarts_total", "Plugin processes restarted after a crash, hang or broken stream, by the plugins the binary serves.", []string{"plugin"}, nil)
	timeoutsDesc  = prometheus.NewDesc("lethe_plugin_timeouts_total", "Items that timed out in a plugin, by plugin.", []string{"plugin"}, nil)
)

const cacheFor = 5 * time.Second

func (c *catalogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backupsDesc
	ch <- workDesc
	ch <- catalogUpDesc
}

func (c *catalogCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > cacheFor {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		phases, err := c.s.cfg.Store.CountByPhase(ctx, backup.Kind)
		var work catalog.WorkCounts
		if err == nil {
			work, err = c.s.cfg.Store.CountWork(ctx, deletion.Queue)
		}
		cancel()
		c.at, c.ok = time.Now(), err == nil
		if err == nil {
			c.phases, c.work = phases, work
		} else {
			c.s.log.Warn("reading the catalog for metrics", "error", err)
		}
	}
	ch <- prometheus.MustNewConstMetric(catalogUpDesc, prometheus.GaugeValue, b2f(c.ok))
	if c.phases == nil {
		return
	}
	for _, p := range []catalog.Phase{catalog.PhaseActive, catalog.PhaseScheduled, catalog.PhaseDeleting} {
		ch <- prometheus.MustNewConstMetric(backupsDesc, prometheus.GaugeValue, float64(c.phases[p]), string(p))
	}
	for state, n := range map[string]int64{"due": c.work.Due, "leased": c.work.Leased, "waiting": c.work.Waiting, "retried": c.work.Retried} {
		ch <- prometheus.MustNewConstMetric(workDesc, prometheus.GaugeValue, float64(n), deletion.Queue, state)
	}
}

type pluginCollector struct{ s *Server }

func (c *pluginCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- restartsDesc
	ch <- timeoutsDesc
}

func (c *pluginCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.cfg.PluginStats == nil {
		return
	}
	for name, st := range c.s.cfg.PluginStats() {
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(st.Restarts), name)
		ch <- prometheus.MustNewConstMetric(timeoutsDesc, prometheus.CounterValue, float64(st.Timeouts), name)
	}
}
