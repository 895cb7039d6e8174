package retry

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lethehq/lethe/internal/catalog"
)

// Metrics are the queue's and the notifier's Prometheus metrics.
type Metrics struct {
	depth             *prometheus.GaugeVec
	attempts          prometheus.Counter
	deadLetters       prometheus.Counter
	deliveries        prometheus.Counter
	deliveryFailures  prometheus.Counter
	deliveriesGivenUp prometheus.Counter
	refused           prometheus.Counter
}

// NewMetrics returns the metrics, registered on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lethe_retry_queue_depth", Help: "Rows of the retry queue by state (retryable, running, discarded).",
		}, []string{"state"}),
		attempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lethe_retry_attempts_total", Help: "Attempts recorded in the retry queue (each did not finish its deletion).",
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lethe_retry_dead_letters_total", Help: "Rows discarded to the dead letters (retries exhausted, or discarded by an operator).",
		}),
		deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lethe_notify_deliveries_total", Help: "Webhook notifications delivered (a 2xx answer).",
		}),
		deliveryFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lethe_notify_delivery_failures_total", Help: "Webhook delivery attempts that failed (error, timeout or non-2xx answer).",
		}),
		deliveriesGivenUp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lethe_notify_given_up_total", Help: "Webhook notifications given up after their delivery attempts.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lethe_notify_refused_total", Help: "Outbox rows refused and never sent: a target that is not configured, or an event that does not read back as Lethe's.",
		}),
	}
	reg.MustRegister(m.depth, m.attempts, m.deadLetters, m.deliveries, m.deliveryFailures, m.deliveriesGivenUp, m.refused)
	return m
}

// Refresh sets the depth gauge from the store (one indexed count).
func (m *Metrics) Refresh(ctx context.Context, st catalog.RetryQueue) error {
	counts, err := st.CountRetries(ctx)
	if err != nil {
		return err
	}
	for _, s := range catalog.RetryStates {
		m.depth.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	return nil
}
