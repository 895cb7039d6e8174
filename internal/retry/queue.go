package retry

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/catalog"
)

// Kinds of rows: what waits.
const (
	// KindBackupItem is an item of a backup's tarball at a plugin. Key is
	// the backup's key, ItemID "ordinal:resource.group/namespace/name".
	KindBackupItem = "BackupItem"
	// KindResource is a catalog resource at a plugin (a resource in
	// Deleting is one item for the plugins that select it). ItemID is
	// empty: the owner is the item.
	KindResource = "Resource"
	// KindWait is a resource waiting on something that is not a plugin:
	// a block reference or a finalizer (ItemID names it, e.g.
	// "reference:Kind/ns/name" or "finalizer:example.com/x"). Plugin is
	// empty.
	KindWait = "Wait"
	// KindLocation is a backup's deletion waiting for its storage
	// location, which cannot be read (the backup's LocationUnavailable
	// condition): ItemID is "location:NAME", Plugin empty. It is
	// recorded with Wait, never charged an attempt, so it never becomes a
	// dead letter; it is looked at again on the policy's backoff, and
	// removed once the location is back.
	KindLocation = "Location"
)

// Event types, in the audit log (action) and in notifications (type).
const (
	EventDeletionStuck     = "DeletionStuck"
	EventAbandoned         = "Abandoned"
	EventDeletionCompleted = "DeletionCompleted"
)

// ConditionDeletionStuck is set True on the owner of a discarded row.
const ConditionDeletionStuck = "DeletionStuck"

// Audit actions of the queue.
const (
	ActionDiscarded = "retry-discarded"
	ActionRetryNow  = "retry-now"
	ActionDiscard   = "retry-discard"
)

// Catalog is the part of the catalog the queue uses.
type Catalog interface {
	catalog.Resources
	catalog.RetryQueue
	catalog.Outbox
}

// Config configures a Queue.
type Config struct {
	Store  Catalog
	Policy Policy
	// Webhooks are the notification targets' URLs: every event is
	// written to the outbox once per target, in the transaction that
	// records it, under the target's URL without credentials
	// (RedactWebhook); the notifier takes the URL and secret from its
	// own configuration when it sends.
	Webhooks []string
	Logger   hclog.Logger
	Now      func() time.Time
	// Rand draws the jitter (tests fix it); nil uses the global source.
	Rand *mrand.Rand
	// Metrics, when set, counts attempts and dead letters.
	Metrics *Metrics
	// Wake, when set, is called after a write that may have made a row
	// or a notification due sooner (the collector's and notifier's
	// timers in this process).
	Wake func()
	// OwnerSync names the kinds of rows whose owner's DeletionStuck
	// condition another engine writes: for those, the queue never writes
	// the condition itself, and calls the function with the owner's UID
	// after a change of its rows (a dead letter, a requeue, a discard,
	// rows removed), so that the one writer reads the rows again. The
	// garbage collector writes it for KindResource and KindWait (it
	// merges the dead letters with the chain of blockers it finds); the
	// queue writes it for the kinds not named here (backup items).
	OwnerSync map[string]func(ctx context.Context, uid string) error
}

// Queue is the retry queue.
type Queue struct {
	cfg Config
	log hclog.Logger
	// targets are the Webhooks as stored (no credentials).
	targets []string
}

// New returns a Queue. A zero Policy is DefaultBackoff for every plugin.
func New(cfg *Config) (*Queue, error) {
	c := *cfg
	if c.Store == nil {
		return nil, errors.New("retry: Config.Store is required")
	}
	if c.Policy.Default == (Backoff{}) {
		c.Policy.Default = DefaultBackoff()
	}
	if err := c.Policy.validate(); err != nil {
		return nil, err
	}
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	if c.Now == nil {
		c.Now = time.Now
	}
	targets, err := WebhookIDs(c.Webhooks)
	if err != nil {
		return nil, err
	}
	return &Queue{cfg: c, log: c.Logger.Named("retry"), targets: targets}, nil
}

// Attach sets the metrics the queue counts into and the function it
// calls when a row or a notification may be due sooner (the daemon's
// collector and notifier). Call it before the queue is shared between
// goroutines.
func (q *Queue) Attach(m *Metrics, wake func()) {
	q.cfg.Metrics, q.cfg.Wake = m, wake
}

// Webhooks are the notification targets, as stored in the outbox
// (without credentials).
func (q *Queue) Webhooks() []string { return slices.Clone(q.targets) }

// Store is the queue's catalog.
func (q *Queue) Store() Catalog { return q.cfg.Store }

// Policy returns the queue's policy.
func (q *Queue) Policy() Policy { return q.cfg.Policy }

func (q *Queue) now() time.Time { return q.cfg.Now().UTC() }

func (q *Queue) wake() {
	if q.cfg.Wake != nil {
		q.cfg.Wake()
	}
}

// Outcome is one attempt that did not finish a deletion.
type Outcome struct {
	Kind   string
	Owner  catalog.Key
	UID    string // the owner's UID
	ItemID string
	Plugin string
	// Result is "failed", "blocked", "waiting" or "error".
	Result  string
	Message string
	// RetryAfter is the plugin's wish (plugin.Blocked): the next attempt
	// is never earlier.
	RetryAfter time.Duration
	Duration   time.Duration
}

// Identity is the row identity of the outcome.
func (o Outcome) Identity() catalog.RetryIdentity {
	return catalog.RetryIdentity{Kind: o.Kind, Key: o.Owner.String(), ItemID: o.ItemID, Plugin: o.Plugin}
}

// Record records attempts that did not finish, in one transaction, and
// returns the rows. A row gets its next attempt from the policy of its
// plugin; one whose attempts reach the maximum is discarded: its owner
// gets the DeletionStuck condition, and an event (audit entry) and its
// notifications (outbox) are written with the row. A row already
// discarded stays so (the attempt joins its history).
func (q *Queue) Record(ctx context.Context, outs ...Outcome) ([]*catalog.RetryRow, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	recs := make([]catalog.RetryRecord, len(outs))
	byID := make(map[catalog.RetryIdentity]Outcome, len(outs))
	now := q.now()
	for i, o := range outs {
		if o.Kind == "" || o.Owner.Kind == "" || o.Owner.Name == "" {
			return nil, fmt.Errorf("retry: an outcome needs a kind and an owner")
		}
		recs[i] = catalog.RetryRecord{RetryIdentity: o.Identity(), OwnerUID: o.UID,
			Attempt: catalog.RetryAttempt{Time: now, Outcome: cmp.Or(o.Result, "failed"), Message: o.Message, Duration: o.Duration}}
		byID[recs[i].RetryIdentity] = o
	}
	// died is keyed by identity: a driver may run decide again if it
	// retries the transaction.
	died := map[catalog.RetryIdentity]*catalog.RetryRow{}
	rows, err := q.cfg.Store.RecordRetries(ctx, recs, func(r *catalog.RetryRow) catalog.RetryPlan {
		if r.State == catalog.RetryDiscarded {
			return catalog.RetryPlan{State: catalog.RetryDiscarded}
		}
		o := byID[r.RetryIdentity]
		b := q.cfg.Policy.For(r.Plugin)
		if r.Attempts >= b.MaxAttempts {
			died[r.RetryIdentity] = r
			reason := fmt.Sprintf("%d of %d attempts failed", r.Attempts, b.MaxAttempts)
			return q.deadPlan(ctx, r, o.Owner, reason, now)
		}
		return catalog.RetryPlan{State: catalog.RetryRetryable, NextAttemptAt: b.Next(now, r.Attempts, o.RetryAfter, q.cfg.Rand)}
	})
	if err != nil {
		return nil, err
	}
	if m := q.cfg.Metrics; m != nil {
		m.attempts.Add(float64(len(rows)))
		m.deadLetters.Add(float64(len(died)))
	}
	owners := map[[2]string]bool{}
	for _, r := range died {
		q.log.Warn("deletion stuck: retries exhausted; the row is discarded and the deletion stays",
			"retry", r.ID, "owner", r.Key, "item", r.ItemID, "plugin", r.Plugin, "attempts", r.Attempts, "lastError", r.LastError)
		owners[[2]string{r.Kind, r.OwnerUID}] = true
	}
	for o := range owners {
		q.syncCondition(ctx, o[0], o[1])
	}
	q.wake()
	return rows, nil
}

// OutcomeWaiting is the outcome, in a row's history, of a look that found
// the owner still waiting (Wait).
const OutcomeWaiting = "waiting"

// Wait records that o's owner waits on something outside any plugin (its
// storage location): the row is created, or its message refreshed, and its
// next look is the policy's backoff after as many looks as its history
// holds. It is not an attempt: the row's attempts stay zero, so it is
// never discarded, and the attempts metric does not count it.
func (q *Queue) Wait(ctx context.Context, o Outcome) (*catalog.RetryRow, error) {
	if o.Kind == "" || o.Owner.Kind == "" || o.Owner.Name == "" {
		return nil, fmt.Errorf("retry: a wait needs a kind and an owner")
	}
	now := q.now()
	rec := catalog.RetryRecord{RetryIdentity: o.Identity(), OwnerUID: o.UID,
		Attempt: catalog.RetryAttempt{Time: now, Outcome: OutcomeWaiting, Message: o.Message}}
	rows, err := q.cfg.Store.RecordRetries(ctx, []catalog.RetryRecord{rec}, func(r *catalog.RetryRow) catalog.RetryPlan {
		looks := 0
		for _, h := range r.History {
			if h.Outcome == OutcomeWaiting {
				looks++
			}
		}
		b := q.cfg.Policy.For(r.Plugin)
		return catalog.RetryPlan{State: catalog.RetryRetryable, NextAttemptAt: b.Next(now, looks, o.RetryAfter, q.cfg.Rand), ResetAttempts: true}
	})
	if err != nil {
		return nil, err
	}
	q.wake()
	return rows[0], nil
}

// deadPlan discards r: the audit entry and one notification per webhook,
// written with the row.
func (q *Queue) deadPlan(ctx context.Context, r *catalog.RetryRow, owner catalog.Key, reason string, now time.Time) catalog.RetryPlan {
	ev := q.event(EventDeletionStuck, r, owner, reason, now)
	details, _ := json.Marshal(map[string]any{"retry": r, "event": ev.ID})
	plan := catalog.RetryPlan{State: catalog.RetryDiscarded,
		Audit: []catalog.AuditEntry{{Time: now, Actor: catalog.ActorFrom(ctx), Action: ActionDiscarded, Kind: owner.Kind,
			Namespace: owner.Namespace, Name: owner.Name, UID: r.OwnerUID,
			Reason:  fmt.Sprintf("DeletionStuck: %s; item %s at %s: %s", reason, cmp.Or(r.ItemID, "-"), cmp.Or(r.Plugin, "-"), r.LastError),
			Details: details}},
		Notifications: q.notifications(ev),
		Note:          &catalog.RetryAttempt{Time: now, Outcome: OutcomeDiscarded, Message: reason},
	}
	return plan
}

// Succeed removes the rows of items whose deletion finished (ids of the
// owner key; nil ids: every row of the owner), and clears DeletionStuck
// on the owner when no discarded row is left.
func (q *Queue) Succeed(ctx context.Context, owner catalog.Key, uid string, ids []catalog.RetryIdentity) error {
	if ids != nil && len(ids) == 0 {
		return nil
	}
	kind := ""
	if len(ids) > 0 {
		kind = ids[0].Kind
	} else if rows, err := q.cfg.Store.ListRetries(ctx, catalog.RetryFilter{Key: owner.String(), Limit: 1}); err == nil && len(rows) > 0 {
		kind = rows[0].Kind
	}
	n, err := q.cfg.Store.DeleteRetries(ctx, owner.String(), ids)
	if err != nil {
		return err
	}
	if n > 0 && uid != "" {
		q.syncCondition(ctx, kind, uid)
	}
	return nil
}

// Finish forgets every row of an owner that is gone (purged). When the
// owner had rows, an event says how it ended: Abandoned when the operator
// purged it with items unfinished, DeletionCompleted when a deletion
// that had a discarded row (DeletionStuck) finished after all.
func (q *Queue) Finish(ctx context.Context, owner catalog.Key, uid string, abandoned bool) error {
	rows, err := q.cfg.Store.ListRetries(ctx, catalog.RetryFilter{Key: owner.String()})
	if err != nil || len(rows) == 0 {
		return err
	}
	typ := ""
	switch {
	case abandoned:
		typ = EventAbandoned
	case slices.ContainsFunc(rows, wasDiscarded):
		typ = EventDeletionCompleted
	}
	if typ != "" {
		now := q.now()
		r := rows[0]
		reason := fmt.Sprintf("%d queued items abandoned by the operator", len(rows))
		if typ == EventDeletionCompleted {
			reason = "the deletion finished after all"
		}
		ev := q.event(typ, r, owner, reason, now)
		ev.Items = len(rows)
		_, err := q.cfg.Store.UpdateRetry(ctx, r.ID, 0, func(cur *catalog.RetryRow) (catalog.RetryPlan, error) {
			details, _ := json.Marshal(map[string]any{"event": ev.ID, "rows": len(rows)})
			return catalog.RetryPlan{State: cur.State, NextAttemptAt: cur.NextAttemptAt,
				Note: &catalog.RetryAttempt{Time: now, Outcome: strings.ToLower(typ), Message: reason},
				Audit: []catalog.AuditEntry{{Time: now, Actor: catalog.ActorFrom(ctx), Action: "retry-" + strings.ToLower(typ),
					Kind: owner.Kind, Namespace: owner.Namespace, Name: owner.Name, UID: uid, Reason: reason, Details: details}},
				Notifications: q.notifications(ev)}, nil
		})
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			return err
		}
	}
	_, err = q.cfg.Store.DeleteRetries(ctx, owner.String(), nil)
	q.wake()
	return err
}

// Get returns one row.
func (q *Queue) Get(ctx context.Context, id int64) (*catalog.RetryRow, error) {
	return q.cfg.Store.GetRetry(ctx, id)
}

// List returns rows.
func (q *Queue) List(ctx context.Context, f catalog.RetryFilter) ([]*catalog.RetryRow, error) {
	return q.cfg.Store.ListRetries(ctx, f)
}

// ErrRunning means the row is being run right now: a requeue would race it.
var ErrRunning = errors.New("the row is running now")

// RetryNow requeues a row at once (also a discarded one, whose attempts
// start again from zero), audited in the name of ctx's actor. With
// dryRun it returns the row as it would become and writes nothing.
func (q *Queue) RetryNow(ctx context.Context, id int64, dryRun bool) (*catalog.RetryRow, error) {
	now := q.now()
	plan := func(r *catalog.RetryRow) (catalog.RetryPlan, error) {
		if r.State == catalog.RetryRunning && r.LeaseExpiresAt.After(now) {
			return catalog.RetryPlan{}, fmt.Errorf("retry row %d: %w (held by %s until %s)", r.ID, ErrRunning, r.Holder, r.LeaseExpiresAt.Format(time.RFC3339))
		}
		owner := ownerKey(r.Key)
		tries := fmt.Sprintf("%d attempts", r.Attempts)
		if r.Attempts == 1 {
			tries = "1 attempt"
		}
		msg := fmt.Sprintf("requeued by %s (was %s, %s)", catalog.ActorFrom(ctx), r.State, tries)
		details, _ := json.Marshal(map[string]any{"retry": r.ID, "item": r.ItemID, "plugin": r.Plugin, "was": r.State, "attempts": r.Attempts})
		return catalog.RetryPlan{State: catalog.RetryRetryable, NextAttemptAt: now, ResetAttempts: r.State == catalog.RetryDiscarded,
			Note: &catalog.RetryAttempt{Time: now, Outcome: "requeued", Message: msg},
			Audit: []catalog.AuditEntry{{Time: now, Actor: catalog.ActorFrom(ctx), Action: ActionRetryNow, Kind: owner.Kind,
				Namespace: owner.Namespace, Name: owner.Name, UID: r.OwnerUID, Reason: msg, Details: details}}}, nil
	}
	if dryRun {
		r, err := q.cfg.Store.GetRetry(ctx, id)
		if err != nil {
			return nil, err
		}
		p, err := plan(r)
		if err != nil {
			return nil, err
		}
		r.State, r.NextAttemptAt = p.State, p.NextAttemptAt
		if p.ResetAttempts {
			r.Attempts = 0
		}
		return r, nil
	}
	r, err := q.cfg.Store.UpdateRetry(ctx, id, 0, plan)
	if err != nil {
		return nil, err
	}
	q.syncCondition(ctx, r.Kind, r.OwnerUID)
	q.wake()
	return r, nil
}

// Discard discards a row by hand: like exhausted retries, its owner gets
// DeletionStuck, and an event and its notifications are written. The
// deletion stays; nothing is purged.
func (q *Queue) Discard(ctx context.Context, id int64, dryRun bool) (*catalog.RetryRow, error) {
	now := q.now()
	plan := func(r *catalog.RetryRow) (catalog.RetryPlan, error) {
		if r.State == catalog.RetryDiscarded {
			return catalog.RetryPlan{}, fmt.Errorf("retry row %d is already discarded", r.ID)
		}
		if r.State == catalog.RetryRunning && r.LeaseExpiresAt.After(now) {
			return catalog.RetryPlan{}, fmt.Errorf("retry row %d: %w (held by %s until %s)", r.ID, ErrRunning, r.Holder, r.LeaseExpiresAt.Format(time.RFC3339))
		}
		p := q.deadPlan(ctx, r, ownerKey(r.Key), "discarded by "+catalog.ActorFrom(ctx), now)
		p.Audit[0].Action = ActionDiscard
		return p, nil
	}
	if dryRun {
		r, err := q.cfg.Store.GetRetry(ctx, id)
		if err != nil {
			return nil, err
		}
		if _, err := plan(r); err != nil {
			return nil, err
		}
		r.State = catalog.RetryDiscarded
		return r, nil
	}
	r, err := q.cfg.Store.UpdateRetry(ctx, id, 0, plan)
	if err != nil {
		return nil, err
	}
	if m := q.cfg.Metrics; m != nil {
		m.deadLetters.Inc()
	}
	q.syncCondition(ctx, r.Kind, r.OwnerUID)
	q.wake()
	return r, nil
}

// OutcomeDiscarded is the history entry of a discard.
const OutcomeDiscarded = "discarded"

// wasDiscarded: the row is, or once was, in the dead letters (an
// operator may have requeued it since).
func wasDiscarded(r *catalog.RetryRow) bool {
	return r.State == catalog.RetryDiscarded ||
		slices.ContainsFunc(r.History, func(a catalog.RetryAttempt) bool { return a.Outcome == OutcomeDiscarded })
}

// ownerKey parses a catalog.Key's String form.
func ownerKey(s string) catalog.Key {
	parts := strings.SplitN(s, "/", 3)
	switch len(parts) {
	case 3:
		return catalog.Key{Kind: parts[0], Namespace: parts[1], Name: parts[2]}
	case 2:
		return catalog.Key{Kind: parts[0], Name: parts[1]}
	}
	return catalog.Key{Name: s}
}

// syncCondition makes the owner's DeletionStuck condition say what its
// rows say: True while any of them is discarded (with the reason and the
// history in the message), False once none is. Best effort: the rows are
// the truth, and the next change of them writes the condition again. For
// a kind in OwnerSync, the engine named there writes the condition: the
// queue only tells it.
func (q *Queue) syncCondition(ctx context.Context, kind, uid string) {
	if uid == "" {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if f := q.cfg.OwnerSync[kind]; f != nil {
		if err := f(ctx, uid); err != nil {
			q.log.Warn("telling the owner's engine that its retry rows changed", "kind", kind, "uid", uid, "error", err)
		}
		return
	}
	for range 3 {
		rows, err := q.cfg.Store.ListRetries(ctx, catalog.RetryFilter{OwnerUID: uid, State: catalog.RetryDiscarded})
		if err != nil {
			q.log.Warn("reading the retry rows of a resource", "uid", uid, "error", err)
			return
		}
		res, err := q.cfg.Store.GetByUID(ctx, uid)
		if err != nil {
			return // purged, or unreadable: nothing to mark
		}
		i := slices.IndexFunc(res.Conditions, func(c catalog.Condition) bool { return c.Type == ConditionDeletionStuck })
		var want catalog.Condition
		switch {
		case len(rows) > 0:
			want = catalog.Condition{Type: ConditionDeletionStuck, Status: "True"}
			want.Reason, want.Message = DeadLetterReason(res, rows)
		case i >= 0 && res.Conditions[i].Status == "True":
			want = catalog.Condition{Type: ConditionDeletionStuck, Status: "False", Reason: "Retrying",
				Message: "no item of its deletion is discarded any more"}
		default:
			return
		}
		if i >= 0 && res.Conditions[i].Status == want.Status && res.Conditions[i].Reason == want.Reason && res.Conditions[i].Message == want.Message {
			return
		}
		want.LastTransitionTime = q.now()
		if i >= 0 {
			if res.Conditions[i].Status == want.Status {
				want.LastTransitionTime = res.Conditions[i].LastTransitionTime
			}
			res.Conditions[i] = want
		} else {
			res.Conditions = append(res.Conditions, want)
		}
		if _, err := q.cfg.Store.Update(ctx, res); errors.Is(err, catalog.ErrConflict) {
			continue
		} else if err != nil {
			q.log.Warn("setting DeletionStuck", "uid", uid, "error", err)
		}
		return
	}
}

// Reasons of the DeletionStuck condition of a dead letter.
const (
	ReasonRetriesExhausted = "RetriesExhausted"
	ReasonDiscarded        = "Discarded"
)

// DeadLetterReason is the reason and message of the DeletionStuck
// condition of res, whose discarded rows are rows (at least one):
// RetriesExhausted, or Discarded when an operator discarded the first;
// the message names the item, the plugin, the attempts, the last error
// and the latest history, and says what to do. Engines that write the
// condition themselves (see Config.OwnerSync) use it.
func DeadLetterReason(res *catalog.Resource, rows []*catalog.RetryRow) (reason, message string) {
	reason = ReasonRetriesExhausted
	if h := rows[0].History; len(h) > 0 && strings.HasPrefix(h[len(h)-1].Message, "discarded by ") {
		reason = ReasonDiscarded
	}
	return reason, stuckMessage(res, rows)
}

// stuckMessage is the condition's message: the first discarded row, its
// last error and its history in short, and where to look for more.
func stuckMessage(res *catalog.Resource, rows []*catalog.RetryRow) string {
	r := rows[0]
	var hist []string
	for _, a := range r.History[max(0, len(r.History)-5):] {
		hist = append(hist, a.Time.Format(time.RFC3339)+" "+a.Outcome)
	}
	what := "item " + cmp.Or(r.ItemID, res.Name)
	if r.Plugin != "" {
		what += " at plugin " + r.Plugin
	}
	next := "fix the cause, then 'lethe retry now %d'"
	if r.Kind == KindBackupItem {
		next += " or abandon the backup"
	}
	msg := fmt.Sprintf("%s: %d attempts since %s, last error: %s; history: %s; the deletion stays (nothing was purged): see 'lethe retry get %d', then "+next,
		what, r.Attempts, r.FirstSeenAt.Format(time.RFC3339), r.LastError, strings.Join(hist, ", "), r.ID, r.ID)
	if len(rows) > 1 {
		msg = fmt.Sprintf("%d items discarded; first: %s", len(rows), msg)
	}
	return msg
}

func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
