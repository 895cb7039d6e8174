package retry_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

var secret = []byte("s3cret-shared-with-the-receiver")

// hook is a real HTTP server that answers with the scripted statuses in
// turn ("hang" waits until the client gives up, "307 URL" redirects),
// then 204; it records every request.
type hook struct {
	srv     *httptest.Server
	mu      sync.Mutex
	script  []string
	got     []request
	release chan struct{}
}

type request struct {
	header http.Header
	query  url.Values
	body   []byte
}

func newHook(t *testing.T, script ...string) *hook {
	h := &hook{script: script, release: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.got = append(h.got, request{header: r.Header.Clone(), query: r.URL.Query(), body: body})
		step := "200"
		if len(h.script) > 0 {
			step, h.script = h.script[0], h.script[1:]
		}
		h.mu.Unlock()
		switch step {
		case "hang":
			select {
			case <-r.Context().Done():
			case <-h.release:
			}
		case "200":
			w.WriteHeader(http.StatusNoContent)
		default:
			// "307 URL": a redirect; any other step is a status code.
			code, to, _ := strings.Cut(step, " ")
			if to != "" {
				w.Header().Set("Location", to)
			}
			c, err := strconv.Atoi(code)
			if err != nil {
				c = http.StatusTeapot
			}
			w.WriteHeader(c)
		}
	}))
	t.Cleanup(func() { close(h.release); h.srv.Close() })
	return h
}

func (h *hook) requests() []request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]request(nil), h.got...)
}

// notifier delivers st's outbox to the webhooks at urls, each with the
// test secret.
func (f *fixture) notifier(t *testing.T, st catalog.Outbox, holder string, urls ...string) *retry.Notifier {
	t.Helper()
	hooks := make([]retry.Webhook, len(urls))
	for i, u := range urls {
		hooks[i] = retry.Webhook{URL: u, Secret: secret}
	}
	n, err := retry.NewNotifier(&retry.NotifierConfig{Store: st, Webhooks: hooks, Holder: holder, Now: f.clock.Now,
		Timeout: 300 * time.Millisecond, LeaseTTL: time.Minute})
	require.NoError(t, err)
	return n
}

// verify checks a request's Standard Webhooks signature with key, at now.
func verify(key []byte, r request, now time.Time) error {
	return retry.VerifyWebhook(key, r.header.Get(retry.HeaderWebhookID), r.header.Get(retry.HeaderWebhookTimestamp),
		r.header.Get(retry.HeaderWebhookSignature), r.body, now, 5*time.Minute)
}

// TestWebhookDeliveryRetries: a webhook that answers 500, then hangs
// past the timeout, then accepts gets the notification three times, each
// signed (Standard Webhooks) with its secret at the time it is sent, and
// carrying the same webhook-id and idempotency key; the outbox backs off between attempts and, once
// delivered, sends nothing more.
func TestWebhookDeliveryRetries(t *testing.T) {
	f := newFixture(t, "sqlite")
	h := newHook(t, "500", "hang")
	q := f.queue(t, f.st, policy(1), h.srv.URL+"/lethe")
	w := f.owner(t, "w")
	_, err := q.Record(f.ctx, failing(w, "boom"))
	require.NoError(t, err)
	n := f.notifier(t, f.st, "me", h.srv.URL+"/lethe")

	var sentAt []time.Time
	for attempt := 1; attempt <= 3; attempt++ {
		sentAt = append(sentAt, f.clock.Now())
		sent, err := n.DeliverDue(f.ctx)
		require.NoError(t, err)
		require.Len(t, h.requests(), attempt, "one request per attempt")
		if attempt < 3 {
			require.Zero(t, sent)
			pending, err := f.st.ListNotifications(f.ctx, catalog.NotificationPending, 0)
			require.NoError(t, err)
			require.Len(t, pending, 1)
			assert.NotEmpty(t, pending[0].LastError)
			// Not again before its backoff.
			sent, err = n.DeliverDue(f.ctx)
			require.NoError(t, err)
			require.Zero(t, sent)
			require.Len(t, h.requests(), attempt)
			require.True(t, pending[0].NextAttemptAt.After(f.clock.Now()))
			f.clock.Advance(pending[0].NextAttemptAt.Sub(f.clock.Now()))
		} else {
			require.Equal(t, 1, sent)
		}
	}
	f.clock.Advance(24 * time.Hour)
	sent, err := n.DeliverDue(f.ctx)
	require.NoError(t, err)
	require.Zero(t, sent)
	reqs := h.requests()
	require.Len(t, reqs, 3, "delivered: nothing more is sent")
	for i, r := range reqs {
		assert.NoError(t, verify(secret, r, sentAt[i]), "signature %q", r.header.Get(retry.HeaderWebhookSignature))
		assert.Equal(t, strconv.FormatInt(sentAt[i].Unix(), 10), r.header.Get(retry.HeaderWebhookTimestamp), "signed when sent")
		assert.Error(t, verify([]byte("wrong"), r, sentAt[i]))
		assert.Error(t, verify(secret, r, sentAt[i].Add(5*time.Minute+time.Second)), "too old")
		assert.Equal(t, reqs[0].header.Get(retry.HeaderIdempotencyKey), r.header.Get(retry.HeaderIdempotencyKey))
		assert.Equal(t, reqs[0].header.Get(retry.HeaderWebhookID), r.header.Get(retry.HeaderWebhookID))
		assert.Equal(t, retry.EventDeletionStuck, r.header.Get(retry.HeaderEvent))
		assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	}
	var ev retry.Event
	require.NoError(t, json.Unmarshal(reqs[0].body, &ev))
	assert.Equal(t, ev.ID, reqs[0].header.Get(retry.HeaderIdempotencyKey))
	assert.Equal(t, ev.ID, reqs[0].header.Get(retry.HeaderWebhookID))
	delivered, err := f.st.ListNotifications(f.ctx, catalog.NotificationDelivered, 0)
	require.NoError(t, err)
	require.Len(t, delivered, 1)
	assert.Equal(t, 3, delivered[0].Attempts)
}

// TestNotificationSurvivesACrash: the event and its notification are
// committed together, so a process that dies before (or while) sending
// loses nothing: another notifier on the reopened catalog delivers it,
// once the dead one's lease has expired.
func TestNotificationSurvivesACrash(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			h := newHook(t)
			q := f.queue(t, f.st, policy(1), h.srv.URL)
			w := f.owner(t, "w")
			_, err := q.Record(f.ctx, failing(w, "boom"))
			require.NoError(t, err)
			// The crashed process had claimed it and never answered.
			claimed, err := f.st.ClaimNotifications(f.ctx, "dead-process", time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			require.NoError(t, f.st.Close())

			st := f.open() // the restart
			n := f.notifier(t, st, "new-process", h.srv.URL)
			sent, err := n.DeliverDue(f.ctx)
			require.NoError(t, err)
			require.Zero(t, sent, "the dead process's lease is still live")
			f.clock.Advance(time.Minute + time.Second)
			sent, err = n.DeliverDue(f.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, sent)
			require.Len(t, h.requests(), 1)
			assert.NoError(t, verify(secret, h.requests()[0], f.clock.Now()))
		})
	}
}

func TestNotifierNeedsASecretPerWebhook(t *testing.T) {
	f := newFixture(t, "sqlite")
	_, err := retry.NewNotifier(&retry.NotifierConfig{Store: f.st, Holder: "me", Webhooks: []retry.Webhook{{URL: "https://a.example/"}}})
	require.ErrorContains(t, err, "secret")
	_, err = retry.New(&retry.Config{Store: f.st, Webhooks: []string{"ftp://x"}})
	require.ErrorContains(t, err, "--notify-webhook")
}

// TestNotifierRunWakes: Run delivers what is due and sleeps until woken.
func TestNotifierRunWakes(t *testing.T) {
	f := newFixture(t, "sqlite")
	h := newHook(t)
	q := f.queue(t, f.st, policy(1), h.srv.URL)
	n := f.notifier(t, f.st, "me", h.srv.URL)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	q.Attach(nil, n.Wake)
	_, err := q.Record(f.ctx, failing(f.owner(t, "w"), "boom"))
	require.NoError(t, err)
	for range 500 {
		if len(h.requests()) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	require.NoError(t, <-done)
	require.Len(t, h.requests(), 1)
}
