package retry_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// TestSignWebhookReproducesTheStandardWebhooksVector: the published test
// vector of Standard Webhooks (secret, id, timestamp, body → signature),
// so that a receiver's existing library accepts what Lethe sends.
func TestSignWebhookReproducesTheStandardWebhooksVector(t *testing.T) {
	key, err := retry.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	const id, ts, body = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, `{"test": 2432232314}`
	sig := retry.SignWebhook(key, id, ts, []byte(body))
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", sig)

	at := time.Unix(ts, 0)
	require.NoError(t, retry.VerifyWebhook(key, id, "1614265330", "v1,bm9wZQ== "+sig, []byte(body), at, 5*time.Minute),
		"any of several signatures")
	require.Error(t, retry.VerifyWebhook(key, id, "1614265330", sig, []byte(body+" "), at, 5*time.Minute), "another body")
	require.Error(t, retry.VerifyWebhook(key, "msg_other", "1614265330", sig, []byte(body), at, 5*time.Minute), "another id")
	require.Error(t, retry.VerifyWebhook(key, id, "1614265331", sig, []byte(body), at, 5*time.Minute), "another timestamp")
	require.ErrorContains(t, retry.VerifyWebhook(key, id, "1614265330", sig, []byte(body), at.Add(5*time.Minute+time.Second), 5*time.Minute), "from now")
	require.ErrorContains(t, retry.VerifyWebhook(key, id, "1614265330", sig, []byte(body), at.Add(-5*time.Minute-time.Second), 5*time.Minute), "from now")

	for _, bad := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_c2hvcnQ="} {
		_, err := retry.ParseSecret(bad)
		require.Error(t, err, bad)
	}
}

func TestRedactWebhookDropsCredentials(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://hooks.example/lethe", "https://hooks.example/lethe"},
		{"https://user:S3cr3t@hooks.example/lethe", "https://hooks.example/lethe"},
		{"https://S3cr3t@hooks.example:8443/lethe", "https://hooks.example:8443/lethe"},
		{"https://hooks.example/lethe?token=S3cr3t&team=ops", "https://hooks.example/lethe?token=xxxxx&team=xxxxx"},
		{"https://hooks.example/lethe?S3cr3tS3cr3tS3cr3t", "https://hooks.example/lethe?xxxxx"},
		{"https://hooks.example/services/T0/B0/S3cr3tS3cr3tS3cr3t", "https://hooks.example/services/T0/B0/xxxxx"},
		{"https://hooks.example/lethe#S3cr3t", "https://hooks.example/lethe"},
		{"https://hooks.example/%zzS3cr3t", "(webhook URL hidden: it does not parse)"},
	} {
		got := retry.RedactWebhook(tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		assert.NotContains(t, got, "S3cr3t", tc.in)
	}
}

// forge inserts a pending outbox row behind the store's back, as anyone
// with write access to the catalog can (the runtime role can write the
// outbox, as it must to record events).
func (f *fixture) forge(target, eventID, eventType, body string) {
	now := f.clock.Now().UnixNano()
	f.exec(`INSERT INTO notifications (event_id, event_type, target, body, state, next_attempt_at, available_at, created_at)
VALUES ($1, $2, $3, $4, 'pending', $5, $5, $6)`, eventID, eventType, target, body, now, now)
}

// outboxRow finds the outbox row of an event.
func (f *fixture) outboxRow(t *testing.T, eventID string) *catalog.Notification {
	t.Helper()
	all, err := f.st.ListNotifications(f.ctx, "", 0)
	require.NoError(t, err)
	for _, n := range all {
		if n.EventID == eventID {
			return n
		}
	}
	t.Fatalf("no outbox row for event %s", eventID)
	return nil
}

func eventJSON(t *testing.T, id, typ string) string {
	t.Helper()
	b, err := json.Marshal(retry.Event{ID: id, Type: typ, Time: epoch, Resource: retry.EventResource{Kind: "Widget", Name: "w"},
		Reason: "forged", FirstSeen: epoch, Explain: "lethe explain Widget w"})
	require.NoError(t, err)
	return string(b)
}

// TestOutboxRowForAnUnconfiguredTargetIsRefusedAuditedAndCounted: a row
// written straight into the catalog that names an attacker's URL is never
// sent there (nor anywhere): it is failed, audited and counted, while
// Lethe's own row goes to the configured webhook. Nothing read back from
// the catalog chooses where a signed request goes.
func TestOutboxRowForAnUnconfiguredTargetIsRefusedAuditedAndCounted(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			hook, attacker := newHook(t), newHook(t)
			q := f.queue(t, f.st, policy(1), hook.srv.URL)
			_, err := q.Record(f.ctx, failing(f.owner(t, "w"), "boom"))
			require.NoError(t, err)

			const forged = "0123456789abcdef0123456789abcdef"
			f.forge(attacker.srv.URL+"/steal", forged, retry.EventDeletionStuck, eventJSON(t, forged, retry.EventDeletionStuck))

			reg := prometheus.NewRegistry()
			m := retry.NewMetrics(reg)
			var logs bytes.Buffer
			n, err := retry.NewNotifier(&retry.NotifierConfig{Store: f.st, Audit: f.st, Holder: "me", Now: f.clock.Now, Metrics: m,
				Webhooks: []retry.Webhook{{URL: hook.srv.URL, Secret: secret}}, Timeout: time.Second,
				Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})})
			require.NoError(t, err)
			sent, err := n.DeliverDue(f.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, sent, "Lethe's own notification")

			require.Empty(t, attacker.requests(), "nothing goes to a target that is not configured")
			require.Len(t, hook.requests(), 1, "the forged row is not sent to the configured webhook either")
			row := f.outboxRow(t, forged)
			require.Equal(t, catalog.NotificationFailed, row.State)
			require.Contains(t, row.LastError, "refused: its target is not a configured --notify-webhook")
			require.Equal(t, 1.0, counter(t, reg, "lethe_notify_refused_total"))
			audit, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{Kind: retry.AuditKindNotification, Name: forged})
			require.NoError(t, err)
			require.Len(t, audit, 1)
			require.Equal(t, retry.ActionNotificationRefused, audit[0].Action)
			require.Contains(t, string(audit[0].Details), attacker.srv.URL+"/steal")
			require.Contains(t, logs.String(), "notification refused")

			f.clock.Advance(24 * time.Hour)
			sent, err = n.DeliverDue(f.ctx)
			require.NoError(t, err)
			require.Zero(t, sent)
			require.Empty(t, attacker.requests(), "refused for good, not retried")
		})
	}
}

// TestSignedBodyIsBuiltFromTheEventNotReadBack: the body Lethe signs is its
// own encoding of the event it reads from the row, never the stored text:
// a row for a configured target whose body is not exactly one of Lethe's
// events (an extra field, trailing data, an id or type that is not the
// row's) is refused, and a well-formed one is sent re-encoded.
func TestSignedBodyIsBuiltFromTheEventNotReadBack(t *testing.T) {
	for _, drv := range driverNames {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, drv)
			hook := newHook(t)
			const (
				ok        = "00000000000000000000000000000001"
				extra     = "00000000000000000000000000000002"
				trailing  = "00000000000000000000000000000003"
				otherID   = "00000000000000000000000000000004"
				otherType = "00000000000000000000000000000005"
				notHex    = "not-an-id-of-lethe"
			)
			good := eventJSON(t, ok, retry.EventDeletionStuck)
			// Spaces and another order of keys: valid, but not Lethe's bytes.
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(good), &m))
			reordered, err := json.MarshalIndent(m, "", "   ")
			require.NoError(t, err)
			f.forge(hook.srv.URL, ok, retry.EventDeletionStuck, string(reordered))
			f.forge(hook.srv.URL, extra, retry.EventDeletionStuck,
				strings.TrimSuffix(eventJSON(t, extra, retry.EventDeletionStuck), "}")+`,"transfer":"all"}`)
			f.forge(hook.srv.URL, trailing, retry.EventDeletionStuck, eventJSON(t, trailing, retry.EventDeletionStuck)+` {"x":1}`)
			f.forge(hook.srv.URL, otherID, retry.EventDeletionStuck, eventJSON(t, ok, retry.EventDeletionStuck))
			f.forge(hook.srv.URL, otherType, "Payout", eventJSON(t, otherType, "Payout"))
			f.forge(hook.srv.URL, notHex, retry.EventDeletionStuck, eventJSON(t, notHex, retry.EventDeletionStuck))

			n := f.notifier(t, f.st, "me", hook.srv.URL)
			sent, err := n.DeliverDue(f.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, sent)
			reqs := hook.requests()
			require.Len(t, reqs, 1)
			require.Equal(t, ok, reqs[0].header.Get(retry.HeaderWebhookID))
			require.JSONEq(t, good, string(reqs[0].body))
			require.Equal(t, good, string(reqs[0].body), "Lethe's encoding, not the stored bytes")
			require.NoError(t, verify(secret, reqs[0], f.clock.Now()))
			for _, id := range []string{extra, trailing, otherID, otherType, notHex} {
				row := f.outboxRow(t, id)
				assert.Equal(t, catalog.NotificationFailed, row.State, id)
				assert.Contains(t, row.LastError, "refused: ", id)
			}
		})
	}
}

// TestRedirectIsAFailedAttemptAndNeverFollowed: a webhook that answers 307
// to another server hands it nothing: the attempt failed and is retried
// later at the configured URL.
func TestRedirectIsAFailedAttemptAndNeverFollowed(t *testing.T) {
	f := newFixture(t, "sqlite")
	elsewhere := newHook(t)
	hook := newHook(t, "307 "+elsewhere.srv.URL+"/collect")
	q := f.queue(t, f.st, policy(1), hook.srv.URL)
	_, err := q.Record(f.ctx, failing(f.owner(t, "w"), "boom"))
	require.NoError(t, err)
	n := f.notifier(t, f.st, "me", hook.srv.URL)
	sent, err := n.DeliverDue(f.ctx)
	require.NoError(t, err)
	require.Zero(t, sent)
	require.Empty(t, elsewhere.requests(), "the redirect is not followed")
	pending, err := f.st.ListNotifications(f.ctx, catalog.NotificationPending, 0)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Contains(t, pending[0].LastError, "307")
}

// TestWebhookCredentialsAreNeitherStoredNorLogged: a webhook URL with a
// user-info password and a token in its query is stored in the outbox and
// shown in logs without them; the request still carries them, from the
// configuration at the time it is sent.
func TestWebhookCredentialsAreNeitherStoredNorLogged(t *testing.T) {
	f := newFixture(t, "sqlite")
	hook := newHook(t, "500")
	u, err := url.Parse(hook.srv.URL + "/lethe?token=T0kenS3cr3t&team=ops")
	require.NoError(t, err)
	u.User = url.UserPassword("lethe", "PassS3cr3t")
	full := u.String()
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})
	q, err := retry.New(&retry.Config{Store: f.st, Policy: policy(1), Webhooks: []string{full}, Now: f.clock.Now, Logger: log})
	require.NoError(t, err)
	_, err = q.Record(f.ctx, failing(f.owner(t, "w"), "boom"))
	require.NoError(t, err)
	n, err := retry.NewNotifier(&retry.NotifierConfig{Store: f.st, Holder: "me", Now: f.clock.Now, Logger: log,
		Webhooks: []retry.Webhook{{URL: full, Secret: secret}}, Timeout: time.Second})
	require.NoError(t, err)
	for range 2 { // 500, then delivered
		_, err = n.DeliverDue(f.ctx)
		require.NoError(t, err)
		f.clock.Advance(retry.DeliveryCapDefault * 2)
	}
	all, err := f.st.ListNotifications(f.ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, catalog.NotificationDelivered, all[0].State)
	stored, err := json.Marshal(all[0])
	require.NoError(t, err)
	var raw []byte // the catalog's files, as anyone who can read them sees them
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(strings.TrimPrefix(f.url, "sqlite://") + suffix)
		if !os.IsNotExist(err) {
			require.NoError(t, err)
		}
		raw = append(raw, b...)
	}
	require.True(t, bytes.Contains(raw, []byte("token=xxxxx")) || bytes.Contains(raw, []byte("T0kenS3cr3t")), "the row is in the files read")
	require.Contains(t, logs.String(), "notification not delivered", "the failed attempt was logged")
	for what, text := range map[string][]byte{"stored row": stored, "logs": logs.Bytes(), "catalog file": raw} {
		assert.False(t, bytes.Contains(text, []byte("S3cr3t")), "a secret in the %s", what)
	}
	assert.Equal(t, hook.srv.URL+"/lethe?token=xxxxx&team=xxxxx", all[0].Target)
	assert.Equal(t, []string{all[0].Target}, q.Webhooks())

	reqs := hook.requests()
	require.Len(t, reqs, 2)
	user, pass, ok := basicAuth(reqs[1].header)
	require.True(t, ok)
	assert.Equal(t, "lethe", user)
	assert.Equal(t, "PassS3cr3t", pass)
	assert.Equal(t, "T0kenS3cr3t", reqs[1].query.Get("token"))
}

func basicAuth(h http.Header) (string, string, bool) {
	r := &http.Request{Header: h}
	return r.BasicAuth()
}

// TestNotificationGivenUpExactlyAtItsMaxAttempts: with 3 delivery attempts
// a notification that always fails is sent 3 times, then given up
// (failed, counted), never a fourth time.
func TestNotificationGivenUpExactlyAtItsMaxAttempts(t *testing.T) {
	f := newFixture(t, "sqlite")
	hook := newHook(t, "500", "500", "500", "500", "500")
	q := f.queue(t, f.st, policy(1), hook.srv.URL)
	_, err := q.Record(f.ctx, failing(f.owner(t, "w"), "boom"))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	m := retry.NewMetrics(reg)
	b := retry.Backoff{Base: time.Second, Cap: time.Minute, MaxAttempts: 3}
	n, err := retry.NewNotifier(&retry.NotifierConfig{Store: f.st, Holder: "me", Now: f.clock.Now, Metrics: m, Backoff: b,
		Webhooks: []retry.Webhook{{URL: hook.srv.URL, Secret: secret}}, Timeout: time.Second})
	require.NoError(t, err)
	for attempt := 1; attempt <= 5; attempt++ {
		_, err := n.DeliverDue(f.ctx)
		require.NoError(t, err)
		all, err := f.st.ListNotifications(f.ctx, "", 0)
		require.NoError(t, err)
		require.Len(t, all, 1)
		if attempt < 3 {
			require.Equal(t, catalog.NotificationPending, all[0].State, "attempt %d", attempt)
		} else {
			require.Equal(t, catalog.NotificationFailed, all[0].State, "given up at attempt %d", attempt)
			require.Equal(t, 3, all[0].Attempts)
		}
		f.clock.Advance(time.Hour)
	}
	require.Len(t, hook.requests(), 3, "exactly MaxAttempts requests")
	require.Equal(t, 1.0, counter(t, reg, "lethe_notify_given_up_total"))
	require.Equal(t, 3.0, counter(t, reg, "lethe_notify_delivery_failures_total"))
}

// TestWebhook4xxAnswerIsNotDelivered: only a 2xx answer delivers. A 4xx
// (the receiver refused the signature, or the URL is wrong) is a failed
// attempt, retried like any other, and never counted as delivered.
func TestWebhook4xxAnswerIsNotDelivered(t *testing.T) {
	for _, code := range []string{"400", "401", "404", "410"} {
		t.Run(code, func(t *testing.T) {
			f := newFixture(t, "sqlite")
			hook := newHook(t, code)
			q := f.queue(t, f.st, policy(1), hook.srv.URL)
			_, err := q.Record(f.ctx, failing(f.owner(t, "w"), "boom"))
			require.NoError(t, err)
			n := f.notifier(t, f.st, "me", hook.srv.URL)
			sent, err := n.DeliverDue(f.ctx)
			require.NoError(t, err)
			require.Zero(t, sent)
			delivered, err := f.st.ListNotifications(f.ctx, catalog.NotificationDelivered, 0)
			require.NoError(t, err)
			require.Empty(t, delivered, "a %s is not delivered", code)
			pending, err := f.st.ListNotifications(f.ctx, catalog.NotificationPending, 0)
			require.NoError(t, err)
			require.Len(t, pending, 1)
			require.Contains(t, pending[0].LastError, code)
			f.clock.Advance(retry.DeliveryCapDefault * 2)
			sent, err = n.DeliverDue(f.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, sent, "retried, then delivered by a 2xx")
		})
	}
}

// TestSecretFileReadableByOthersIsRefused: like ssh with a private key.
func TestSecretFileReadableByOthersIsRefused(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hook.whsec")
	require.NoError(t, os.WriteFile(p, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"), 0o600))
	s, err := retry.ReadSecretFile(p)
	require.NoError(t, err)
	require.Equal(t, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", s)
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620, 0o666} {
		require.NoError(t, os.Chmod(p, mode))
		_, err := retry.ReadSecretFile(p)
		require.ErrorContains(t, err, "readable or writable by group or others", "mode %04o", mode)
	}
	_, err = retry.ReadSecretFile(dir)
	require.ErrorContains(t, err, "not a regular file")
}

// counter is the value of the counter name registered on reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
