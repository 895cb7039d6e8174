package federation

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The answers a message of the outbox can get, as lethe_peer_messages_total
// counts them.
const (
	ResultAccepted   = "accepted"   // the peer took it
	ResultRefused    = "refused"    // the peer answered no
	ResultUnanswered = "unanswered" // no answer: put off with a backoff
)

// Metrics are the federation's Prometheus metrics, per peer: the outbox's
// delivery attempts by the answer they got (counted by a Dispatcher
// given them), and, read from the catalog at each scrape, the messages
// not answered yet, the age of the oldest, the forward edges by state and
// the back-references held. A scrape that cannot read the catalog counts
// an error and leaves those gauges out: unknown, never zero.
type Metrics struct {
	cfg   *Config
	store Store

	messages   *prometheus.CounterVec
	readErrors prometheus.Counter

	pending, oldest, edges, stubs *prometheus.Desc

	now func() time.Time
}

// NewMetrics returns the metrics of the peers cfg names and of those the
// catalog still holds something of.
func NewMetrics(cfg *Config, store Store) *Metrics {
	return &Metrics{cfg: cfg, store: store, now: time.Now,
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lethe_peer_messages_total",
			Help: "Delivery attempts of the peer outbox, by peer and answer (accepted, refused, unanswered).",
		}, []string{"peer", "result"}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lethe_peer_status_read_errors_total",
			Help: "Scrapes that could not read the peers' state from the catalog (their gauges were left out).",
		}),
		pending: prometheus.NewDesc("lethe_peer_outbox_pending",
			"Messages to the peer not answered yet.", []string{"peer"}, nil),
		oldest: prometheus.NewDesc("lethe_peer_outbox_oldest_pending_seconds",
			"Age of the oldest message to the peer not answered yet (0 when none).", []string{"peer"}, nil),
		edges: prometheus.NewDesc("lethe_peer_references",
			"References from this server to resources on the peer, by state.", []string{"peer", "state"}, nil),
		stubs: prometheus.NewDesc("lethe_peer_back_references",
			"Back-references this server holds for the peer's referrers.", []string{"peer"}, nil),
	}
}

// observe counts one delivery attempt; m may be nil.
func (m *Metrics) observe(peer, result string) {
	if m != nil {
		m.messages.WithLabelValues(peer, result).Inc()
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.messages.Describe(ch)
	m.readErrors.Describe(ch)
	ch <- m.pending
	ch <- m.oldest
	ch <- m.edges
	ch <- m.stubs
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.messages.Collect(ch)
	defer m.readErrors.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	peers, err := Status(ctx, m.cfg, m.store, false, 0)
	if err != nil {
		m.readErrors.Inc()
		return
	}
	now := m.now()
	for _, p := range peers {
		ch <- prometheus.MustNewConstMetric(m.pending, prometheus.GaugeValue, float64(p.PendingMessages), p.Name)
		age := 0.0
		if p.OldestPending != nil {
			age = max(0, now.Sub(*p.OldestPending).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(m.oldest, prometheus.GaugeValue, age, p.Name)
		ch <- prometheus.MustNewConstMetric(m.edges, prometheus.GaugeValue, float64(p.References.Pending), p.Name, "pending")
		ch <- prometheus.MustNewConstMetric(m.edges, prometheus.GaugeValue, float64(p.References.Acknowledged), p.Name, "acknowledged")
		ch <- prometheus.MustNewConstMetric(m.edges, prometheus.GaugeValue, float64(p.References.Refused), p.Name, "refused")
		ch <- prometheus.MustNewConstMetric(m.stubs, prometheus.GaugeValue, float64(p.BackReferences), p.Name)
	}
}
