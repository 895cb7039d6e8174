package retry_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/retry"
)

// TestMetrics: queue depth by state, attempts, dead letters, and webhook
// deliveries and failures are counted where they happen.
func TestMetrics(t *testing.T) {
	f := newFixture(t, "sqlite")
	reg := prometheus.NewRegistry()
	m := retry.NewMetrics(reg)
	h := newHook(t, "500")
	q := f.queue(t, f.st, policy(2), h.srv.URL)
	q.Attach(m, nil)
	w := f.owner(t, "w")
	_, err := q.Record(f.ctx, failing(w, "a"), failing(f.owner(t, "v"), "b"))
	require.NoError(t, err)
	_, err = q.Record(f.ctx, failing(w, "a"))
	require.NoError(t, err)
	require.NoError(t, m.Refresh(f.ctx, f.st))

	n, err := retry.NewNotifier(&retry.NotifierConfig{Store: f.st, Webhooks: []retry.Webhook{{URL: h.srv.URL, Secret: secret}}, Holder: "me", Now: f.clock.Now, Metrics: m})
	require.NoError(t, err)
	_, err = n.DeliverDue(f.ctx) // 500
	require.NoError(t, err)
	f.clock.Advance(retry.DeliveryCapDefault * 2)
	_, err = n.DeliverDue(f.ctx) // accepted
	require.NoError(t, err)

	got := map[string]float64{}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range mt.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			if c := mt.GetCounter(); c != nil {
				got[name] = c.GetValue()
			} else if g := mt.GetGauge(); g != nil {
				got[name] = g.GetValue()
			}
		}
	}
	require.Equal(t, map[string]float64{
		"lethe_retry_attempts_total":               3,
		"lethe_retry_dead_letters_total":           1,
		"lethe_retry_queue_depth{state=discarded}": 1,
		"lethe_retry_queue_depth{state=retryable}": 1,
		"lethe_retry_queue_depth{state=running}":   0,
		"lethe_notify_deliveries_total":            1,
		"lethe_notify_delivery_failures_total":     1,
		"lethe_notify_given_up_total":              0, "lethe_notify_refused_total": 0,
	}, got)
}
