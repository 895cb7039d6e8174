package catalog

import (
	"context"
	"encoding/json"
	"time"
)

// RetryState is the state of a retry-queue row (see RetryRow). After
// River's explicit job states: a row waits (Retryable), is run by the
// holder of its lease (Running), or is discarded to the dead letters
// (Discarded) once its attempts are exhausted or an operator discards it.
// A row whose deletion finished has no row any more.
type RetryState string

// The retry-queue states.
const (
	RetryRetryable RetryState = "retryable"
	RetryRunning   RetryState = "running"
	RetryDiscarded RetryState = "discarded"
)

// RetryStates lists every state, in display order.
var RetryStates = []RetryState{RetryRetryable, RetryRunning, RetryDiscarded}

// RetryIdentity names one thing whose deletion cannot finish yet: a row
// of the retry queue is unique by it.
type RetryIdentity struct {
	// Kind is what the row is: a backup item at a plugin, a catalog
	// resource at a plugin, a resource waiting on a block reference or a
	// finalizer (the constants are internal/retry's).
	Kind string `json:"kind"`
	// Key is the owner's key, e.g. "Backup/nightly-0412".
	Key string `json:"key"`
	// ItemID names the item within the owner, e.g. a backup item's
	// "ordinal:resource.group/namespace/name"; empty when the owner is
	// the item.
	ItemID string `json:"itemId,omitempty"`
	// Plugin is the plugin the item waits on; empty for a wait on a
	// reference or a finalizer.
	Plugin string `json:"plugin,omitempty"`
}

// RetryAttempt is one entry of a row's history.
type RetryAttempt struct {
	Time     time.Time     `json:"time"`
	Outcome  string        `json:"outcome"` // e.g. "failed", "blocked", "waiting", "error", "requeued", "discarded"
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration"`
}

// RetryHistoryMax is how many attempts a row's history keeps (the newest).
const RetryHistoryMax = 50

// RetryRow is one row of the retry queue.
type RetryRow struct {
	ID int64 `json:"id"`
	RetryIdentity
	// OwnerUID is the UID of the resource that owns the row (the backup,
	// or the resource itself).
	OwnerUID      string         `json:"ownerUid,omitempty"`
	State         RetryState     `json:"state"`
	NextAttemptAt time.Time      `json:"nextAttemptAt,omitzero"`
	Attempts      int            `json:"attempts"`
	LastError     string         `json:"lastError,omitempty"`
	History       []RetryAttempt `json:"history"`
	FirstSeenAt   time.Time      `json:"firstSeenAt"`
	UpdatedAt     time.Time      `json:"updatedAt"`
	// Holder, LeaseExpiresAt and Epoch are the lease while Running; Epoch
	// grows at every claim and every recorded attempt.
	Holder         string    `json:"holder,omitempty"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt,omitzero"`
	Epoch          int64     `json:"epoch"`
}

// RetryRecord is one attempt to record (see RetryQueue.RecordRetries).
type RetryRecord struct {
	RetryIdentity
	OwnerUID string
	Attempt  RetryAttempt
}

// RetryPlan is what a row becomes, decided by the caller inside the
// transaction that writes it.
type RetryPlan struct {
	State         RetryState
	NextAttemptAt time.Time
	// ResetAttempts sets the attempts back to zero (an operator requeue
	// of a discarded row).
	ResetAttempts bool
	// Note, when set, is appended to the history (an operator action).
	Note *RetryAttempt
	// Audit entries and Notifications are written in the same
	// transaction as the row: an event and its notifications are never
	// one without the other, whatever crashes.
	Audit         []AuditEntry
	Notifications []Notification
}

// RetryFilter filters ListRetries. Zero fields do not filter.
type RetryFilter struct {
	State RetryState
	Kind  string
	Key   string
	// OwnerUID selects the rows of one owner.
	OwnerUID string
	Limit    int
}

// RetryQueue is the retry queue of deletions that cannot finish yet
// (internal/retry holds the policy; the store only keeps rows).
type RetryQueue interface {
	// RecordRetries records one attempt for each record in one
	// transaction: the row is created when new; its attempts grow by one,
	// the attempt joins its history (the newest RetryHistoryMax kept) and
	// becomes its last error, and any lease ends. decide then gets the
	// row (its State still the one before) and returns what it becomes.
	RecordRetries(ctx context.Context, recs []RetryRecord, decide func(*RetryRow) RetryPlan) ([]*RetryRow, error)
	// UpdateRetry changes one row by id. With epoch > 0 the row must still
	// be at that epoch (the claim that read it), else ErrLeaseLost. fn's
	// error aborts the write and is returned.
	UpdateRetry(ctx context.Context, id, epoch int64, fn func(*RetryRow) (RetryPlan, error)) (*RetryRow, error)
	// DeleteRetries removes rows whose deletion finished: the given
	// identities of the owner key, or every row of it when ids is nil.
	DeleteRetries(ctx context.Context, key string, ids []RetryIdentity) (int, error)
	// ClaimRetries leases up to limit rows that are due (Retryable with
	// NextAttemptAt ≤ now, or Running with an expired lease), oldest
	// first; FOR UPDATE SKIP LOCKED on PostgreSQL. Each claim moves the
	// row to Running and bumps its Epoch.
	ClaimRetries(ctx context.Context, holder string, ttl time.Duration, limit int) ([]*RetryRow, error)
	// NextRetryDue is the earliest time a row can be claimed, from an
	// index (no scan).
	NextRetryDue(ctx context.Context) (time.Time, bool, error)
	GetRetry(ctx context.Context, id int64) (*RetryRow, error)
	// ListRetries returns matching rows in (NextAttemptAt, id) order,
	// discarded rows by id.
	ListRetries(ctx context.Context, f RetryFilter) ([]*RetryRow, error)
	// CountRetries counts rows by state.
	CountRetries(ctx context.Context) (map[RetryState]int64, error)
}

// NotificationState is the delivery state of an outbox row.
type NotificationState string

// The outbox states.
const (
	NotificationPending   NotificationState = "pending"
	NotificationDelivered NotificationState = "delivered"
	// NotificationFailed: delivery gave up after its attempts.
	NotificationFailed NotificationState = "failed"
)

// Notification is one message of the outbox, for one target.
type Notification struct {
	ID int64 `json:"id"`
	// EventID is the idempotency key: the same for every target and every
	// delivery attempt of one event.
	EventID   string            `json:"eventId"`
	EventType string            `json:"eventType"`
	Target    string            `json:"target"`
	Body      json.RawMessage   `json:"body"`
	State     NotificationState `json:"state"`
	// NextAttemptAt is when delivery is next tried (zero means now).
	NextAttemptAt  time.Time `json:"nextAttemptAt,omitzero"`
	Attempts       int       `json:"attempts"`
	LastError      string    `json:"lastError,omitempty"`
	CreatedAt      time.Time `json:"createdAt"`
	DeliveredAt    time.Time `json:"deliveredAt,omitzero"`
	Holder         string    `json:"holder,omitempty"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt,omitzero"`
	Epoch          int64     `json:"epoch"`
}

// Outbox holds notifications until they are delivered (at least once).
type Outbox interface {
	// ClaimNotifications leases up to limit pending notifications that are
	// due (or whose lease expired); each claim counts an attempt.
	ClaimNotifications(ctx context.Context, holder string, ttl time.Duration, limit int) ([]*Notification, error)
	// FinishNotification ends the claim (id, epoch): state Delivered or
	// Failed ends delivery; Pending puts it off to next with lastErr.
	// ErrLeaseLost if the notification was claimed again since.
	FinishNotification(ctx context.Context, id, epoch int64, state NotificationState, next time.Time, lastErr string) error
	// NextNotificationDue is the earliest time a pending notification
	// can be claimed, from an index.
	NextNotificationDue(ctx context.Context) (time.Time, bool, error)
	// ListNotifications lists the outbox, newest first (state filters
	// when set; limit 0 means 500).
	ListNotifications(ctx context.Context, state NotificationState, limit int) ([]*Notification, error)
}
