package retry

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"slices"
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

// notifications are the outbox rows of ev, one per webhook. A row names
// its target without credentials (Webhook.ID) and holds the event's
// fields; the notifier builds and signs the request from both and the
// configuration of the moment.
func (q *Queue) notifications(ev Event) []catalog.Notification {
	if len(q.targets) == 0 {
		return nil
	}
	body, err := json.Marshal(ev)
	if err != nil {
		q.log.Error("encoding a notification", "error", err)
		return nil
	}
	out := make([]catalog.Notification, len(q.targets))
	for i, id := range q.targets {
		out[i] = catalog.Notification{EventID: ev.ID, EventType: ev.Type, Target: id, Body: body}
	}
	return out
}

// The other webhook request headers (Lethe's own).
const (
	// HeaderIdempotencyKey is the event id, as webhook-id: a receiver
	// that sees it twice got the same event twice (delivery is at least
	// once).
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderEvent          = "X-Lethe-Event"
	HeaderDelivery       = "X-Lethe-Delivery"
)

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
	Store catalog.Outbox
	// Webhooks are the targets a notification may go to, each with its
	// own secret. A row of the outbox that names any other target is
	// refused: never sent, audited (Audit) and counted.
	Webhooks []Webhook
	// Audit records the refused rows (nil: logged and counted only).
	Audit catalog.Audit
	// Client sends the requests; its Timeout is replaced by Timeout, and
	// it never follows a redirect.
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
	cfg     NotifierConfig
	log     hclog.Logger
	client  *http.Client
	wakeC   chan struct{}
	targets map[string]Webhook // by Webhook.ID
}

// NewNotifier returns a Notifier. Every webhook needs a secret: a
// receiver must be able to tell Lethe's requests from anyone else's.
func NewNotifier(cfg *NotifierConfig) (*Notifier, error) {
	c := *cfg
	if c.Store == nil {
		return nil, errors.New("retry: NotifierConfig.Store is required")
	}
	if c.Holder == "" {
		return nil, errors.New("retry: NotifierConfig.Holder is required")
	}
	urls := make([]string, len(c.Webhooks))
	for i, w := range c.Webhooks {
		if len(w.Secret) == 0 {
			return nil, fmt.Errorf("--notify-webhook %q needs a secret to sign its notifications: add ,secret-file=FILE", w.ID())
		}
		urls[i] = w.URL
	}
	ids, err := WebhookIDs(urls)
	if err != nil {
		return nil, err
	}
	targets := make(map[string]Webhook, len(ids))
	for i, id := range ids {
		targets[id] = c.Webhooks[i]
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
	// A redirect would hand the signed body and its headers to a host
	// nobody configured: a 3xx is a failed attempt.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Notifier{cfg: c, log: c.Logger.Named("notify"), client: client, wakeC: make(chan struct{}, 1), targets: targets}, nil
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

// ActionNotificationRefused is the audit action of an outbox row that
// was not sent: it names a target that is not configured, or its event
// does not read back as one of Lethe's.
const ActionNotificationRefused = "notification-refused"

// AuditKindNotification is the audit kind of outbox rows (name: the
// event id).
const AuditKindNotification = "Notification"

func (n *Notifier) deliver(ctx context.Context, no *catalog.Notification) bool {
	w, body, refusal := n.prepare(no)
	if refusal != "" {
		n.refuse(ctx, no, refusal)
		return false
	}
	target := w.ID()
	err := n.post(ctx, w, no, body)
	now := n.cfg.Now().UTC()
	state, next, msg := catalog.NotificationDelivered, time.Time{}, ""
	if err != nil {
		msg = err.Error()
		state, next = catalog.NotificationPending, n.cfg.Backoff.Next(now, no.Attempts, 0, n.cfg.Rand)
		if no.Attempts >= n.cfg.Backoff.MaxAttempts {
			state = catalog.NotificationFailed
			n.log.Error("giving up a notification after its attempts", "event", no.EventType, "id", no.EventID,
				"target", target, "attempts", no.Attempts, "error", err)
		} else {
			n.log.Warn("notification not delivered; will retry", "event", no.EventType, "id", no.EventID,
				"target", target, "attempt", no.Attempts, "next", next, "error", err)
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

// eventID: what an event id may be (newEventID writes 32 hex digits).
var eventID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// prepare resolves a row's target from the configuration and rebuilds
// its body from the event's fields; a non-empty refusal says why the
// row must not be sent. Nothing read back from the catalog is trusted:
// the target must be one configured now (the row holds only its ID), and
// the body is Lethe's own encoding of an Event whose id and type match
// the row's.
func (n *Notifier) prepare(no *catalog.Notification) (Webhook, []byte, string) {
	w, ok := n.targets[no.Target]
	if !ok {
		// A row written before targets were stored without
		// credentials names the full URL: its stored form must still be
		// a configured target, and the request goes to the configured
		// URL, never the row's.
		w, ok = n.targets[RedactWebhook(no.Target)]
	}
	if !ok {
		return Webhook{}, nil, "its target is not a configured --notify-webhook"
	}
	var ev Event
	dec := json.NewDecoder(bytes.NewReader(no.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil || dec.More() {
		return Webhook{}, nil, "its event does not read back as a Lethe event"
	}
	switch {
	case !eventID.MatchString(ev.ID) || ev.ID != no.EventID:
		return Webhook{}, nil, "its event id is not Lethe's, or not the row's"
	case !slices.Contains([]string{EventDeletionStuck, EventAbandoned, EventDeletionCompleted}, ev.Type) || ev.Type != no.EventType:
		return Webhook{}, nil, "its event type is not one of Lethe's, or not the row's"
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return Webhook{}, nil, "its event cannot be encoded"
	}
	return w, body, ""
}

// refuse ends a row that must not be sent: failed, audited, counted and
// logged, with its target shown without credentials.
func (n *Notifier) refuse(ctx context.Context, no *catalog.Notification, why string) {
	ctx = context.WithoutCancel(ctx)
	target := RedactWebhook(no.Target)
	n.log.Error("notification refused: not sent", "reason", why, "id", strconv.Quote(no.EventID), "row", no.ID, "target", strconv.Quote(target))
	if m := n.cfg.Metrics; m != nil {
		m.refused.Inc()
	}
	if a := n.cfg.Audit; a != nil {
		details, _ := json.Marshal(map[string]any{"row": no.ID, "eventId": no.EventID, "eventType": no.EventType, "target": target})
		if err := a.AppendAudit(catalog.WithDefaultActor(ctx, n.cfg.Holder), catalog.AuditEntry{Time: n.cfg.Now().UTC(),
			Actor: n.cfg.Holder, Action: ActionNotificationRefused, Kind: AuditKindNotification, Name: no.EventID,
			Reason: "notification refused: " + why, Details: details}); err != nil {
			n.log.Warn("auditing a refused notification", "row", no.ID, "error", err)
		}
	}
	if err := n.cfg.Store.FinishNotification(ctx, no.ID, no.Epoch, catalog.NotificationFailed, time.Time{}, "refused: "+why); err != nil {
		n.log.Warn("recording a refused notification", "row", no.ID, "error", err)
	}
}

func (n *Notifier) post(ctx context.Context, w Webhook, no *catalog.Notification, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("cannot build the request") // the error would quote the URL
	}
	ts := n.cfg.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lethe")
	req.Header.Set(HeaderWebhookID, no.EventID)
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderWebhookSignature, SignWebhook(w.Secret, no.EventID, ts, body))
	req.Header.Set(HeaderIdempotencyKey, no.EventID)
	req.Header.Set(HeaderEvent, no.EventType)
	req.Header.Set(HeaderDelivery, strconv.FormatInt(no.ID, 10)+"."+strconv.Itoa(no.Attempts))
	resp, err := n.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the log line already, without credentials
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A 3xx too: redirects are not followed. A 4xx is not delivered
		// either, and is retried like any failure.
		// The status code only: the reason text is the receiver's, and
		// goes to logs and the catalog.
		return fmt.Errorf("webhook answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
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
