package retry_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// TestEvery2xxAnswerIsDeliveredAndNothingElse: a webhook's answer from
// 200 to 299 delivers the notification; 300 or 400 is a failed attempt.
func TestEvery2xxAnswerIsDeliveredAndNothingElse(t *testing.T) {
	for code, delivered := range map[int]bool{200: true, 299: true, 300: false, 400: false} {
		f := newFixture(t, "sqlite")
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
		q := f.queue(t, f.st, policy(1), srv.URL)
		_, err := q.Record(f.ctx, failing(f.owner(t, "w"), "boom"))
		require.NoError(t, err)
		sent, err := f.notifier(t, f.st, "me", srv.URL).DeliverDue(f.ctx)
		require.NoError(t, err)
		srv.Close()
		if delivered {
			require.Equal(t, 1, sent, "%d is delivered", code)
		} else {
			require.Zero(t, sent, "%d is not delivered", code)
		}
	}
}

// countingOutbox counts how often a notifier asks when the next
// notification is due: once per wake-up of its loop.
type countingOutbox struct {
	catalog.Store
	asks atomic.Int32
}

func (c *countingOutbox) NextNotificationDue(ctx context.Context) (time.Time, bool, error) {
	c.asks.Add(1)
	return c.Store.NextNotificationDue(ctx)
}

// TestAnIdleNotifierSleepsUntilResync: with nothing in the outbox, a
// notifier's loop looks once and then sleeps until Resync (or a wake):
// it never polls (DESIGN §6: timers wake when something is due, no
// periodic scans).
func TestAnIdleNotifierSleepsUntilResync(t *testing.T) {
	f := newFixture(t, "sqlite")
	st := &countingOutbox{Store: f.st}
	n, err := retry.NewNotifier(&retry.NotifierConfig{Store: st, Holder: "me", Now: f.clock.Now, Resync: time.Hour,
		Webhooks: []retry.Webhook{{URL: "http://receiver.invalid/lethe", Secret: secret}}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	require.Eventually(t, func() bool { return st.asks.Load() >= 1 }, 10*time.Second, time.Millisecond)
	time.Sleep(300 * time.Millisecond) // a polling loop would ask again every 10ms
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, int32(1), st.asks.Load(), "an idle notifier polled")
}

// TestJitterSpreadsEachDelayWithinItsFraction: a backoff with jitter j
// moves each delay by a random fraction within ±j of it (never exactly
// the delay, for the draws of this source); with no jitter the delay is
// exact.
func TestJitterSpreadsEachDelayWithinItsFraction(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b := retry.Backoff{Base: time.Second, Cap: time.Hour, MaxAttempts: 5, Jitter: 0.5}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 4; n++ {
		d := b.Delay(n)
		got := b.Next(now, n, 0, r).Sub(now)
		require.NotEqual(t, d, got, "attempt %d: no jitter", n)
		require.GreaterOrEqual(t, got, d/2)
		require.LessOrEqual(t, got, d+d/2)
	}
	b.Jitter = 0
	require.Equal(t, 16*time.Second, b.Next(now, 2, 0, r).Sub(now))
}
