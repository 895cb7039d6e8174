package retry

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"

	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/catalog"
)

// Event is the JSON body of a notification (schema in docs/retry.md).
type Event struct {
	// ID is unique per event and is also the Idempotency-Key header: the
	// same for every delivery attempt and every target.
	ID       string        `json:"id"`
	Type     string        `json:"type"` // DeletionStuck, Abandoned, DeletionCompleted
	Time     time.Time     `json:"time"`
	Resource EventResource `json:"resource"`
	// Item is the row's item (absent when the owner is the item).
	Item      *EventItem `json:"item,omitempty"`
	Plugin    string     `json:"plugin,omitempty"`
	Attempts  int        `json:"attempts"`
	LastError string     `json:"lastError,omitempty"`
	Reason    string     `json:"reason"`
	FirstSeen time.Time  `json:"firstSeen"`
	RetryID   int64      `json:"retryId,omitempty"`
	// Items is how many queue rows the owner had (Abandoned,
	// DeletionCompleted).
	Items int `json:"items,omitempty"`
	// Explain is the command that says why the resource is not gone yet.
	Explain string `json:"explain"`
	// Inspect is the command that shows the row with its history.
	Inspect string `json:"inspect,omitempty"`
}

// EventResource names the owner.
type EventResource struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// EventItem names the item of a row.
type EventItem struct {
	Kind string `json:"kind"`
	ID   string `json:"id,omitempty"`
}

func (q *Queue) event(typ string, r *catalog.RetryRow, owner catalog.Key, reason string, now time.Time) Event {
	ev := Event{ID: newEventID(), Type: typ, Time: now,
		Resource: EventResource{Kind: owner.Kind, Namespace: owner.Namespace, Name: owner.Name, UID: r.OwnerUID},
		Plugin:   r.Plugin, Attempts: r.Attempts, LastError: r.LastError, Reason: reason, FirstSeen: r.FirstSeenAt,
		RetryID: r.ID, Explain: ExplainCommand(owner)}
	if r.Kind != KindResource {
		ev.Item = &EventItem{Kind: r.Kind, ID: r.ItemID}
	}
	if r.ID != 0 {
		ev.Inspect = "lethe retry get " + strconv.FormatInt(r.ID, 10)
	}
	return ev
}

// ExplainCommand is the `lethe explain` command line for a resource, as
// it runs: kinds are matched exactly (only "backup" is a lowercase alias).
func ExplainCommand(k catalog.Key) string {
	kind := k.Kind
	if kind == "Backup" {
		kind = "backup"
	}
	cmd := "lethe explain " + kind
	if k.Namespace != "" {
		cmd += " -n " + k.Namespace
	}
	return cmd + " " + k.Name
}

func (q *Queue) notifications(ev Event) []catalog.Notification {
	if len(q.cfg.Webhooks) == 0 {
		return nil
	}
	body, err := json.Marshal(ev)
	if err != nil {
		q.log.Error("encoding a notification", "error", err)
		return nil
	}
	out := make([]catalog.Notification, len(q.cfg.Webhooks))
	for i, u := range q.cfg.Webhooks {
		out[i] = catalog.Notification{EventID: ev.ID, EventType: ev.Type, Target: u, Body: body}
	}
	return out
}

func validWebhook(u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("--notify-webhook %q: use an http:// or https:// URL", catalog.RedactURL(u))
	}
	return nil
}

// The webhook request headers.
const (
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256 of the body
	// with the shared secret.
	HeaderSignature = "X-Lethe-Signature-256"
	// HeaderIdempotencyKey is the event id: a receiver that sees it twice
	// got the same event twice (delivery is at least once).
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderEvent          = "X-Lethe-Event"
	HeaderDelivery       = "X-Lethe-Delivery"
)

// Sign returns the value of HeaderSignature for body.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a HeaderSignature value in constant time (for receivers
// written in Go, and the tests).
func Verify(secret, body []byte, signature string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(signature))
}

// Notifier defaults.
const (
	DeliveryTimeoutDefault = 10 * time.Second
	// DeliveryBackoff: 5s·n⁴ capped at an hour, 12 attempts (about 7.5
	// hours) before a notification is given up (logged, counted).
	DeliveryBaseDefault        = 5 * time.Second
	DeliveryCapDefault         = time.Hour
	DeliveryMaxAttemptsDefault = 12
	// ResyncDefault bounds how long a timer sleeps without looking at
	// the index again: rows written by another process wake nobody here.
	ResyncDefault = time.Minute
)

// NotifierConfig configures a Notifier.
type NotifierConfig struct {
	Store  catalog.Outbox
	Secret []byte
	// Client sends the requests; its Timeout is replaced by Timeout.
	Client  *http.Client
	Timeout time.Duration
	Backoff Backoff
	// Holder names this process in leases; LeaseTTL must cover a
	// delivery (default 2×Timeout + 10s).
	Holder   string
	LeaseTTL time.Duration
	Logger   hclog.Logger
	Now      func() time.Time
	Rand     *mrand.Rand
	Metrics  *Metrics
	// Resync bounds a sleep (ResyncDefault).
	Resync time.Duration
}

// Notifier delivers the outbox to the webhooks, at least once.
type Notifier struct {
	cfg    NotifierConfig
	log    hclog.Logger
	client *http.Client
	wakeC  chan struct{}
}

// NewNotifier returns a Notifier. A secret is required: a webhook must
// be able to tell Lethe's requests from anyone else's.
func NewNotifier(cfg *NotifierConfig) (*Notifier, error) {
	c := *cfg
	if c.Store == nil {
		return nil, errors.New("retry: NotifierConfig.Store is required")
	}
	if len(c.Secret) == 0 {
		return nil, errors.New("notifications need a shared secret for their signature: set LETHE_NOTIFY_SECRET or --notify-secret-file")
	}
	if c.Holder == "" {
		return nil, errors.New("retry: NotifierConfig.Holder is required")
	}
	c.Timeout = cmp.Or(c.Timeout, DeliveryTimeoutDefault)
	if c.Backoff == (Backoff{}) {
		c.Backoff = Backoff{Base: DeliveryBaseDefault, Cap: DeliveryCapDefault, MaxAttempts: DeliveryMaxAttemptsDefault, Jitter: JitterDefault}
	}
	c.LeaseTTL = cmp.Or(c.LeaseTTL, 2*c.Timeout+10*time.Second)
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Resync = cmp.Or(c.Resync, ResyncDefault)
	client := &http.Client{}
	if c.Client != nil {
		cl := *c.Client
		client = &cl
	}
	client.Timeout = c.Timeout
	return &Notifier{cfg: c, log: c.Logger.Named("notify"), client: client, wakeC: make(chan struct{}, 1)}, nil
}

// Wake makes Run look at the outbox at once.
func (n *Notifier) Wake() {
	select {
	case n.wakeC <- struct{}{}:
	default:
	}
}

// DeliverDue claims the notifications that are due and tries each once.
// It returns how many were delivered.
func (n *Notifier) DeliverDue(ctx context.Context) (int, error) {
	delivered := 0
	for {
		batch, err := n.cfg.Store.ClaimNotifications(ctx, n.cfg.Holder, n.cfg.LeaseTTL, 16)
		if err != nil || len(batch) == 0 {
			return delivered, err
		}
		for _, no := range batch {
			if n.deliver(ctx, no) {
				delivered++
			}
		}
	}
}

func (n *Notifier) deliver(ctx context.Context, no *catalog.Notification) bool {
	err := n.post(ctx, no)
	now := n.cfg.Now().UTC()
	state, next, msg := catalog.NotificationDelivered, time.Time{}, ""
	if err != nil {
		msg = err.Error()
		state, next = catalog.NotificationPending, n.cfg.Backoff.Next(now, no.Attempts, 0, n.cfg.Rand)
		if no.Attempts >= n.cfg.Backoff.MaxAttempts {
			state = catalog.NotificationFailed
			n.log.Error("giving up a notification after its attempts", "event", no.EventType, "id", no.EventID,
				"target", catalog.RedactURL(no.Target), "attempts", no.Attempts, "error", err)
		} else {
			n.log.Warn("notification not delivered; will retry", "event", no.EventType, "id", no.EventID,
				"target", catalog.RedactURL(no.Target), "attempt", no.Attempts, "next", next, "error", err)
		}
	}
	if m := n.cfg.Metrics; m != nil {
		if err != nil {
			m.deliveryFailures.Inc()
			if state == catalog.NotificationFailed {
				m.deliveriesGivenUp.Inc()
			}
		} else {
			m.deliveries.Inc()
		}
	}
	if ferr := n.cfg.Store.FinishNotification(context.WithoutCancel(ctx), no.ID, no.Epoch, state, next, msg); ferr != nil {
		n.log.Warn("recording a delivery", "id", no.EventID, "error", ferr)
	}
	return err == nil
}

func (n *Notifier) post(ctx context.Context, no *catalog.Notification) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, no.Target, bytes.NewReader(no.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lethe")
	req.Header.Set(HeaderSignature, Sign(n.cfg.Secret, no.Body))
	req.Header.Set(HeaderIdempotencyKey, no.EventID)
	req.Header.Set(HeaderEvent, no.EventType)
	req.Header.Set(HeaderDelivery, strconv.FormatInt(no.ID, 10)+"."+strconv.Itoa(no.Attempts))
	resp, err := n.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the log line already, redacted
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

// Run delivers until ctx ends, sleeping until the next notification is
// due (from the outbox's index), a Wake, or Resync.
func (n *Notifier) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if _, err := n.DeliverDue(ctx); err != nil && ctx.Err() == nil {
			n.log.Error("delivering notifications", "error", err)
		}
		wait := n.cfg.Resync
		if due, ok, err := n.cfg.Store.NextNotificationDue(ctx); err == nil && ok {
			wait = min(wait, max(due.Sub(n.cfg.Now()), minSleep))
		}
		if !sleep(ctx, wait, n.wakeC) {
			return nil
		}
	}
	return nil
}

// minSleep keeps a timer whose due time has passed (another process
// holds the row) from spinning.
const minSleep = 10 * time.Millisecond

// sleep waits d, or until wake fires; false when ctx ended.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}
