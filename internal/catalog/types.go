package catalog

import (
	"encoding/json"
	"time"
)

// Phase is a resource's place in the lifecycle. Purged resources have no row.
type Phase string

// The lifecycle phases of DESIGN §1.
const (
	PhaseActive    Phase = "Active"
	PhaseScheduled Phase = "Scheduled"
	PhaseDeleting  Phase = "Deleting"
	// PhasePurged is never stored: it names the target of Purge in errors
	// and audit entries.
	PhasePurged Phase = "Purged"
)

// Propagation says what happens to dependents when an owner is deleted.
type Propagation string

// Propagation policies, after Kubernetes.
const (
	PropagationForeground Propagation = "Foreground" // default: dependents first
	PropagationBackground Propagation = "Background"
	PropagationOrphan     Propagation = "Orphan"
)

// OnTargetDelete says what happens to a reference when its target goes.
type OnTargetDelete string

// Reference policies, after Goten.
const (
	RefBlock         OnTargetDelete = "block"
	RefUnset         OnTargetDelete = "unset"
	RefCascade       OnTargetDelete = "cascade"
	RefAllowDangling OnTargetDelete = "allowDangling"
)

// Well-known annotations and finalizers.
const (
	AnnotationDeletionDelay       = "lethe.io/deletion-delay"
	AnnotationDeletionScheduledAt = "lethe.io/deletion-scheduled-at"
	FinalizerCascade              = "lethe.io/cascade"
	FinalizerDeleteActions        = "lethe.io/delete-actions"
)

// Key names a resource. Namespace is empty for cluster-scoped resources.
type Key struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (k Key) String() string {
	if k.Namespace == "" {
		return k.Kind + "/" + k.Name
	}
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// ObjectRef names one resource, by key and UID.
type ObjectRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// Key returns the key the reference names.
func (o ObjectRef) Key() Key { return Key{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name} }

func (o ObjectRef) String() string { return o.Key().String() }

// Ref returns a reference to r.
func (r *Resource) Ref() ObjectRef {
	return ObjectRef{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: r.UID}
}

// OwnerRef points from a dependent to its owner.
type OwnerRef struct {
	UID                string `json:"uid"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	BlockOwnerDeletion bool   `json:"blockOwnerDeletion,omitempty"`
}

// Reference points from a resource to a target it uses.
type Reference struct {
	Kind           string         `json:"kind"`
	Namespace      string         `json:"namespace,omitempty"`
	Name           string         `json:"name"`
	UID            string         `json:"uid,omitempty"`
	OnTargetDelete OnTargetDelete `json:"onTargetDelete"`
}

// Condition is a typed observation about a resource, e.g. DeletionStuck.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"` // "True", "False", "Unknown"
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// Resource is one row of the catalog.
type Resource struct {
	Kind        string            `json:"kind"`
	Namespace   string            `json:"namespace,omitempty"`
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Owners      []OwnerRef        `json:"owners,omitempty"`
	References  []Reference       `json:"references,omitempty"`
	Finalizers  []string          `json:"finalizers,omitempty"`

	Phase Phase `json:"phase"`
	// DeletionDueAt is when a Scheduled resource becomes Deleting.
	DeletionDueAt *time.Time `json:"deletionDueAt,omitempty"`
	// DeletionTimestamp is set when the resource enters Deleting.
	DeletionTimestamp *time.Time  `json:"deletionTimestamp,omitempty"`
	PropagationPolicy Propagation `json:"propagationPolicy,omitempty"`
	// DeletionRoot is the resource whose requested deletion reached this
	// one through a cascade (its owners' or its references' targets'),
	// set when the cascade moves it to Scheduled or Deleting; nil when
	// its own deletion was asked for. Undelete clears it; only the
	// lifecycle methods change it.
	DeletionRoot *ObjectRef `json:"deletionRoot,omitempty"`

	Conditions []Condition     `json:"conditions,omitempty"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"`

	// ResourceVersion increases on every write; Update fails with
	// ErrConflict when it does not match the stored one.
	ResourceVersion int64     `json:"resourceVersion"`
	CreatedAt       time.Time `json:"createdAt"`
	UpdatedAt       time.Time `json:"updatedAt"`
}

// Key returns the resource's key.
func (r *Resource) Key() Key { return Key{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name} }

// ListOptions filters List. Zero fields do not filter.
type ListOptions struct {
	Kind      string
	Namespace string
	// LabelSelector is in Kubernetes syntax.
	LabelSelector string
	Phase         Phase
	// Limit caps the page size (0: driver default, 500). Continue is the
	// token from the previous page.
	Limit    int
	Continue string
}

// ListResult is one page of List.
type ListResult struct {
	Items []*Resource
	// Continue is empty on the last page.
	Continue string
}

// Transition options.

// ScheduleOptions moves an Active resource to Scheduled.
type ScheduleOptions struct {
	Delay       time.Duration
	Propagation Propagation
	Reason      string
	// Root, when set, is the root of the cascade that schedules the
	// resource: it is stored as its DeletionRoot and named in the audit
	// entry's details.
	Root *ObjectRef
}

// DeleteOptions moves an Active or Scheduled resource to Deleting. A
// Scheduled resource whose delay has not expired needs Force.
type DeleteOptions struct {
	Propagation Propagation
	// Finalizers are added on entry to Deleting.
	Finalizers []string
	Force      bool
	// OnlyIfScheduled refuses (with a *TransitionError) unless the resource
	// is Scheduled when the write happens: the grace-window timer uses it,
	// so that a resource undeleted meanwhile is not deleted.
	OnlyIfScheduled bool
	Reason          string
	// Action names the audit entry (default: delete, or force-delete
	// with Force); the collector says cascade-delete for what a cascade
	// reaches.
	Action string
	// Root, when set, is the root of the cascade that reaches the
	// resource: it is stored as its DeletionRoot and named in the audit
	// entry's details. Unset, a Scheduled resource keeps the root its
	// Schedule recorded.
	Root *ObjectRef
	// Enqueue, when set, names a work queue: the work item (Enqueue, the
	// resource's UID) is queued, to run now, in the same transaction as
	// the move to Deleting. A request that commits is then never left
	// without its work item, whatever happens to the caller after (a cut
	// connection, a crash, a leader's term ending).
	Enqueue string
}

// PurgeOptions removes a Deleting resource whose finalizers are all gone.
// Force purges despite remaining finalizers, and is audited as such.
type PurgeOptions struct {
	Force   bool
	Reason  string
	Details json.RawMessage
	// Finalizer, when set and present, is removed first, in the same
	// transaction, exactly as RemoveFinalizer removes it (its UPDATED
	// event and remove-finalizer audit entry, one version before the
	// DELETED event): the holder of the last finalizer finishes and
	// purges in one write. If the purge is refused (another finalizer
	// remains), nothing is written and the finalizer stays.
	Finalizer string
}

// Tombstone is what remains of a purged resource.
type Tombstone struct {
	Key      Key             `json:"key"`
	UID      string          `json:"uid"`
	PurgedAt time.Time       `json:"purgedAt"`
	Actor    string          `json:"actor"`
	Reason   string          `json:"reason,omitempty"`
	Details  json.RawMessage `json:"details,omitempty"`
	// DeletionRoot is the purged resource's DeletionRoot: the cascade it
	// was purged in.
	DeletionRoot *ObjectRef `json:"deletionRoot,omitempty"`
}

// AuditEntry is one append-only record of a lifecycle change or purge.
type AuditEntry struct {
	ID        int64           `json:"id"`
	Time      time.Time       `json:"time"`
	Actor     string          `json:"actor"`
	Action    string          `json:"action"` // e.g. "create", "schedule", "undelete", "delete", "remove-finalizer", "purge", "force-purge"
	Kind      string          `json:"kind"`
	Namespace string          `json:"namespace,omitempty"`
	Name      string          `json:"name"`
	UID       string          `json:"uid"`
	FromPhase Phase           `json:"fromPhase,omitempty"`
	ToPhase   Phase           `json:"toPhase,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
}

// AuditLeaveCascade is the audit action of the write by which Undelete
// takes a resource out of the cascades that reached it (its details:
// {"owners": [...], "references": [...]}, each {kind, namespace, name,
// uid, phase}).
const AuditLeaveCascade = "leave-cascade"

// AuditFilter filters ListAudit. Zero fields do not filter.
type AuditFilter struct {
	Kind      string
	Namespace string
	Name      string
	UID       string
	Since     time.Time
	Limit     int
}

// EventType is the type of a change feed event.
type EventType string

// Change feed event types.
const (
	EventAdded   EventType = "ADDED"
	EventUpdated EventType = "UPDATED"
	EventDeleted EventType = "DELETED"
)

// Event is one change. Version is the resourceVersion the change produced;
// for DELETED, Resource is the last state.
type Event struct {
	Type     EventType `json:"type"`
	Version  int64     `json:"version"`
	Resource *Resource `json:"resource"`
}

// WatchOptions starts a subscription. Events with Version > FromVersion are
// delivered, in order, with none missing. Kind filters when set.
type WatchOptions struct {
	FromVersion int64
	Kind        string
}

// WorkItem is a unit of work claimed with a lease: a deletion, a retry job.
type WorkItem struct {
	ID      int64           `json:"id"`
	Queue   string          `json:"queue"`
	Key     string          `json:"key"` // unique within the queue
	Payload json.RawMessage `json:"payload,omitempty"`
	RunAt   time.Time       `json:"runAt"`
	// Holder and LeaseExpiresAt are set while the item is claimed.
	Holder         string    `json:"holder,omitempty"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt,omitzero"`
	// Epoch grows by one at every claim (Claim, ClaimKey), also when the
	// same holder claims the item again: it names one claim, and fences
	// the writes made under it (see Fence).
	Epoch     int64     `json:"epoch"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// TakenOverFrom is set on the item a claim (Claim, ClaimKey) returns
	// when the claim took over a lease another holder let expire without
	// releasing it (a dead or stalled process): that holder. It is not
	// stored.
	TakenOverFrom string `json:"takenOverFrom,omitempty"`
}

// Fence names one claim of a work item: the item's ID and the Epoch the
// claim got. A write fenced by it fails with ErrLeaseLost, and changes
// nothing, unless that claim is still the item's latest and its lease is
// live. Two runs of one process share a holder name but never an epoch,
// so the older one is fenced off as soon as the newer one claims.
type Fence struct {
	Queue  string
	Key    string
	ID     int64
	Holder string
	Epoch  int64
}

// Fence returns the fence of this claim of the item.
func (w *WorkItem) Fence() *Fence {
	return &Fence{Queue: w.Queue, Key: w.Key, ID: w.ID, Holder: w.Holder, Epoch: w.Epoch}
}

// DeletionProgress is the persisted progress of one backup deletion. Items
// are numbered by their ordinal in the tarball (deterministic for a given
// tarball, whose Digest is recorded). Every item below Watermark is settled:
// it is done or skipped by every matching plugin, or it has ItemOutcome rows
// for its unsettled plugin. Items at or above Watermark are processed again
// on resume (at-least-once).
type DeletionProgress struct {
	UID        string                  `json:"uid"`
	Digest     string                  `json:"digest"`
	Watermark  int64                   `json:"watermark"`
	TotalItems int64                   `json:"totalItems"`
	Counts     map[string]OutcomeCount `json:"counts"` // by plugin
	UpdatedAt  time.Time               `json:"updatedAt"`
}

// OutcomeCount counts a plugin's settled outcomes.
type OutcomeCount struct {
	Done    int64 `json:"done"`
	Skipped int64 `json:"skipped"`
	Failed  int64 `json:"failed"`
	Blocked int64 `json:"blocked"`
}

// ItemOutcome is an unsettled (failed or blocked) result for one item and
// plugin, kept until the item is done. Later plugins of that item have not
// run: the chain stops at the first unsettled plugin.
type ItemOutcome struct {
	UID           string    `json:"uid"`
	Ordinal       int64     `json:"ordinal"`
	ItemKey       string    `json:"itemKey"` // "resource.group/namespace/name"
	Plugin        string    `json:"plugin"`
	Outcome       string    `json:"outcome"` // "failed" or "blocked"
	Message       string    `json:"message,omitempty"`
	NextAttemptAt time.Time `json:"nextAttemptAt,omitzero"`
	Attempts      int       `json:"attempts"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// Checkpoint is one atomic progress write.
type Checkpoint struct {
	// Fence, when set, makes the write fail with ErrLeaseLost unless the
	// holder still holds the lease.
	Fence    *Fence
	Progress DeletionProgress
	// Upsert adds or replaces outcome rows (by UID, Ordinal, Plugin).
	Upsert []ItemOutcome
	// Settle removes outcome rows that are now done or skipped.
	Settle []ItemOutcome
}

// DeleteItem is one resource for DeleteMany: its key and what Delete
// would be given.
type DeleteItem struct {
	Key     Key
	Options DeleteOptions
}

// CollectItem is one resource for CollectBatch: its UID and the
// resourceVersion the caller saw, and the reason audited.
type CollectItem struct {
	UID             string
	ResourceVersion int64
	Reason          string
}

// LeaderLease is a named lease that replicas compete for: the replica
// holding it runs the singleton loops (TTL expiry, grace-window timers).
// Term grows by one each time the lease changes hands, also when the same
// holder takes it again after it expired.
type LeaderLease struct {
	Name   string `json:"name"`
	Holder string `json:"holder,omitempty"` // empty: free (never taken, or resigned)
	Term   int64  `json:"term"`
	// AcquiredAt is when the current term began; RenewedAt when the holder
	// last renewed it; ExpiresAt when it lapses unless renewed.
	AcquiredAt time.Time `json:"acquiredAt,omitzero"`
	RenewedAt  time.Time `json:"renewedAt,omitzero"`
	ExpiresAt  time.Time `json:"expiresAt,omitzero"`
	// TookOver is set on the lease AcquireLeader returns when this call
	// began a term by taking over a lease whose holder let it expire
	// without resigning (it died or lost the catalog).
	TookOver bool `json:"tookOver,omitempty"`
}

// HeldBy reports whether holder holds the lease at now.
func (l *LeaderLease) HeldBy(holder string, now time.Time) bool {
	return l != nil && l.Holder != "" && l.Holder == holder && l.ExpiresAt.After(now)
}

// Leader-lease audit actions (kind AuditKindLeader, name the lease name).
const (
	AuditKindLeader       = "LeaderLease"
	AuditLeaderElected    = "leader-elected"
	AuditLeaderResigned   = "leader-resigned"
	WakeTopicLeaderPrefix = "leader/"
)

// WorkCounts counts a queue's items: Due can be claimed now, Leased are
// held by a live lease, Waiting have a run time in the future (a retry's
// backoff). Retried counts those claimed more than once.
type WorkCounts struct {
	Due     int64 `json:"due"`
	Leased  int64 `json:"leased"`
	Waiting int64 `json:"waiting"`
	Retried int64 `json:"retried"`
}
