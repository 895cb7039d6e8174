package catalog

import (
	"context"
	"time"
)

// Store is the catalog: every role below, plus Close. Drivers implement it
// whole; an engine asks only for the roles it uses, by embedding them in a
// small interface of its own. Every method is safe for concurrent use.
// Every lifecycle method appends an audit entry and a change-feed event in
// the same transaction as its write, in the name of the actor the context
// carries (see WithActor).
type Store interface {
	Resources
	Lifecycle
	Graph
	WorkQueue
	Feed
	Progress
	Audit
	RetryQueue
	Outbox
	Leadership
	Wake
	Counts
	Federation
	Tokens
	Close() error
}

// Resources reads and writes resources outside the deletion lifecycle.
type Resources interface {
	// Create inserts a resource in phase Active (an empty UID gets a new
	// one). ErrAlreadyExists if the key is taken.
	Create(ctx context.Context, r *Resource) (*Resource, error)
	// CreateBatch creates many resources in one transaction, all or
	// nothing (bulk loads, imports). Each resource gets its own
	// resourceVersion, ADDED event and audit entry, as with Create.
	CreateBatch(ctx context.Context, rs []*Resource) ([]*Resource, error)
	Get(ctx context.Context, k Key) (*Resource, error)
	// GetMany reads many keys at once (a few queries, not one per key):
	// out[i] is keys[i]'s resource, nil when it does not exist.
	GetMany(ctx context.Context, keys []Key) ([]*Resource, error)
	GetByUID(ctx context.Context, uid string) (*Resource, error)
	List(ctx context.Context, opts ListOptions) (*ListResult, error)
	// Update writes labels, annotations, owners, references, finalizers,
	// conditions, spec and status. r.ResourceVersion must match the stored
	// one (ErrConflict otherwise). Phase and deletion fields are changed
	// only by the lifecycle methods; a finalizer cannot be added to a
	// Deleting resource.
	Update(ctx context.Context, r *Resource) (*Resource, error)
	// WriteBatch makes creates and updates in one transaction, all or
	// nothing, in order (each write gets its own resourceVersion, event
	// and audit entry). Each write is checked as Create or Update checks
	// it (ErrAlreadyExists, ErrConflict, *TransitionError); an owner uid
	// must name a stored resource or one created earlier in the batch
	// (ErrNotFound otherwise). The first failure rolls everything back,
	// and its error names the resource. A created resource it returns
	// shares its maps and slices with the one given.
	WriteBatch(ctx context.Context, ws []Write) ([]*Resource, error)
	// WriteEach is WriteBatch for writes too many to hold at once (an
	// apply of tens of thousands of resources): n writes in one
	// transaction, all or nothing, in order; at(i) is asked for the i-th
	// write when it is made, and done(i, r) is handed what was stored.
	// at's error rolls everything back. at may be called again from 0
	// when the transaction is retried.
	WriteEach(ctx context.Context, n int, at func(i int) (Write, error), done func(i int, r *Resource)) error
}

// Write is one write of WriteBatch: Create inserts Resource as Create
// does; otherwise Resource updates the stored one as Update does.
type Write struct {
	Create   bool
	Resource *Resource
}

// Lifecycle moves a resource through Active, Scheduled, Deleting and
// purged, and finds what is due.
type Lifecycle interface {
	// Schedule: Active → Scheduled, due at now+Delay; sets the
	// lethe.io/deletion-scheduled-at annotation to now (RFC 3339).
	Schedule(ctx context.Context, k Key, opts ScheduleOptions) (*Resource, error)
	// Undelete: Scheduled → Active (also after the delay expired, as long
	// as the resource has not entered Deleting); clears the annotation and
	// the DeletionRoot. The resource also leaves every cascade that
	// reaches it, in the same transaction: its owner edges to owners that
	// are Deleting or gone, and its cascade references to targets that
	// are Deleting, are removed, as a second write one version later
	// (UPDATED event, AuditLeaveCascade entry). It returns the resource
	// as it is after both.
	Undelete(ctx context.Context, k Key, reason string) (*Resource, error)
	// Schedule and Delete refuse (*TransitionError) a resource that a
	// peer holds a back-reference to (see Federation).
	//
	// Delete: Active or Scheduled → Deleting (irreversible). Sets the
	// deletion timestamp and adds opts.Finalizers; the propagation policy
	// is opts' (else Schedule's, else Foreground).
	Delete(ctx context.Context, k Key, opts DeleteOptions) (*Resource, error)
	// DeleteMany is Delete of many resources in one transaction, in
	// order: each moved gets its own resourceVersion (consecutive, in
	// the items' order), UPDATED event and audit entry, as with Delete.
	// One that Delete would refuse (ErrNotFound, a *TransitionError) is
	// left unchanged and errs[i] says why; the others are written. Any
	// other failure rolls everything back (err). out[i] is item i's
	// resource after the call, nil when refused.
	DeleteMany(ctx context.Context, items []DeleteItem) (out []*Resource, errs []error, err error)
	// RemoveFinalizer removes one finalizer of a Deleting resource
	// (*TransitionError in other phases). Removing an absent finalizer
	// is a no-op that returns the resource unchanged.
	RemoveFinalizer(ctx context.Context, k Key, finalizer string) (*Resource, error)
	// RemoveFinalizers is RemoveFinalizer of one finalizer from many
	// resources in one transaction, all or nothing, in order: each
	// resource that had it gets its own resourceVersion, UPDATED event
	// and "remove-finalizer" audit entry, as with RemoveFinalizer; one
	// without it is left unchanged. The first failure (ErrNotFound, a
	// *TransitionError for a resource that is not Deleting) rolls
	// everything back, and its error names the resource. out[i] is
	// keys[i]'s resource as it is after the call.
	RemoveFinalizers(ctx context.Context, keys []Key, finalizer string) ([]*Resource, error)
	// Purge: Deleting with no finalizers → gone, leaving a Tombstone. Only
	// a Deleting resource can be purged; Force skips remaining finalizers;
	// opts.Finalizer is removed first, in the same transaction.
	Purge(ctx context.Context, k Key, opts PurgeOptions) error
	// DueScheduled returns Scheduled resources due at or before t, oldest
	// first, from an index.
	DueScheduled(ctx context.Context, t time.Time, limit int) ([]*Resource, error)
	// NextDue returns the earliest due time of any Scheduled resource.
	NextDue(ctx context.Context) (time.Time, bool, error)
	// GetTombstone returns the tombstone of a purged resource.
	GetTombstone(ctx context.Context, k Key) (*Tombstone, error)
	// CollectBatch deletes and purges, in one transaction, each resource
	// of items that can go at once: it still has the UID and
	// resourceVersion the caller saw, is Active or Scheduled, has no
	// finalizer, no dependent (no owner edge points to it) and no
	// reference to it other than allowDangling ones and no back-reference
	// from a peer. Such a resource
	// never is Deleting: it goes from its phase to Purged in one step,
	// with one DELETED change event carrying its last stored state (as
	// Kubernetes sends for an object deleted without finalizers; the
	// event's version is its resourceVersion), one "purge" audit entry
	// from its phase to Purged, and a tombstone. The others are left
	// unchanged; the UIDs purged are returned.
	CollectBatch(ctx context.Context, items []CollectItem) ([]string, error)
}

// Graph follows owner and reference edges.
type Graph interface {
	// Dependents lists resources with an owner edge to uid.
	Dependents(ctx context.Context, ownerUID string) ([]*Resource, error)
	// Referrers lists resources with a reference to the target.
	Referrers(ctx context.Context, target Key) ([]*Resource, error)
}

// WorkQueue is the leased work queue (claims, fencing, release).
type WorkQueue interface {
	// Enqueue adds a work item, or returns the existing one for the same
	// (queue, key).
	Enqueue(ctx context.Context, w WorkItem) (*WorkItem, error)
	// Claim leases up to limit due, unleased (or lease-expired) items;
	// each claim increments Attempts and Epoch.
	Claim(ctx context.Context, queue, holder string, ttl time.Duration, limit int) ([]*WorkItem, error)
	// ClaimKey leases one item by key; *LeaseHeldError if another holder
	// has a live lease, ErrNotFound if there is no such item. The same
	// holder may claim its own live item again: that claim gets a new
	// Epoch, which fences off the earlier one.
	ClaimKey(ctx context.Context, queue, key, holder string, ttl time.Duration) (*WorkItem, error)
	// Renew extends the live lease of the claim f names; ErrLeaseLost if
	// the lease has expired or the item was claimed again since.
	Renew(ctx context.Context, f *Fence, ttl time.Duration) (*WorkItem, error)
	// Release gives the claim f names up, setting the next run time and
	// last error.
	Release(ctx context.Context, f *Fence, runAt time.Time, lastErr string) error
	// Complete removes a finished work item. Release and Complete fail
	// with ErrLeaseLost only if the item was claimed again since f.
	Complete(ctx context.Context, f *Fence) error
	// NextAvailable returns when the queue's next item can be claimed:
	// the earliest run time of an unleased item or lease expiry of a
	// leased one (false if the queue is empty). Idle workers sleep until
	// then instead of polling.
	NextAvailable(ctx context.Context, queue string) (time.Time, bool, error)
	GetWork(ctx context.Context, queue, key string) (*WorkItem, error)
	ListWork(ctx context.Context, queue string) ([]*WorkItem, error)
}

// Feed is the change feed.
type Feed interface {
	// Watch streams change events after opts.FromVersion, in order. The
	// channel closes when ctx ends or the subscription fails (see Err on
	// the returned Subscription).
	Watch(ctx context.Context, opts WatchOptions) (Subscription, error)
	// CurrentVersion is the newest resourceVersion.
	CurrentVersion(ctx context.Context) (int64, error)
}

// Progress is the deletion progress of a backup (see DeletionProgress).
type Progress interface {
	SaveCheckpoint(ctx context.Context, c Checkpoint) error
	LoadProgress(ctx context.Context, uid string) (*DeletionProgress, []ItemOutcome, error)
	// LoadProgressMany is LoadProgress of many resources at once (a few
	// queries, not one per resource): progress[i] and outcomes[i] are
	// uids[i]'s, nil when it has none.
	LoadProgressMany(ctx context.Context, uids []string) (progress []*DeletionProgress, outcomes [][]ItemOutcome, err error)
	DeleteProgress(ctx context.Context, uid string) error
}

// Audit is the audit log.
type Audit interface {
	AppendAudit(ctx context.Context, e AuditEntry) error
	// ListAudit returns matching entries oldest first; with f.Limit, the
	// newest f.Limit of them (still oldest first).
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error)
}

// Subscription is a change-feed subscription.
type Subscription interface {
	Events() <-chan Event
	// Err is the reason the channel closed, nil after a clean stop.
	Err() error
	Close() error
}

// Leadership is the leader lease: one named lease in the catalog that the
// replicas compete for, so that singleton loops run in one place.
type Leadership interface {
	// AcquireLeader takes the named lease for holder for ttl when it is
	// free, expired, or already holder's (then it is renewed: same term,
	// later expiry). It returns the lease as it stands after the call;
	// HeldBy(holder, now) says whether holder leads. A new term appends an
	// audit entry (AuditLeaderElected) in the same transaction.
	AcquireLeader(ctx context.Context, name, holder string, ttl time.Duration) (*LeaderLease, error)
	// ResignLeader frees the lease at once if holder holds it (a no-op
	// otherwise), audits it, and wakes the other replicas
	// (WakeTopicLeaderPrefix+name), so one of them takes over without
	// waiting for the lease to expire.
	ResignLeader(ctx context.Context, name, holder string) error
	// GetLeader returns the lease; ErrNotFound if it was never taken.
	GetLeader(ctx context.Context, name string) (*LeaderLease, error)
}

// Wake tells idle replicas that something may be ready for them.
type Wake interface {
	// Wakeups subscribes to wake-up hints: the queue's name after Enqueue
	// or after a Release that makes the item due now, and
	// WakeTopicLeaderPrefix+name after ResignLeader. Hints come from this
	// process's commits and, on PostgreSQL, from every replica's
	// (LISTEN/NOTIFY). A hint may be lost or repeated: it only says "look
	// again"; callers keep a slow poll as a safety net. The channel closes
	// when ctx ends or the store closes.
	Wakeups(ctx context.Context) (Wakeups, error)
}

// Wakeups is a wake-up subscription.
type Wakeups interface {
	C() <-chan string
	Close() error
}

// Counts are the cheap aggregate reads metrics are made of.
type Counts interface {
	// CountByPhase counts the resources of kind in each phase.
	CountByPhase(ctx context.Context, kind string) (map[Phase]int64, error)
	// CountWork counts a queue's items by state at now.
	CountWork(ctx context.Context, queue string) (WorkCounts, error)
	// Kinds lists, sorted, every kind the catalog has ever held: those of
	// its resources and of its audit log (a purged kind stays known).
	Kinds(ctx context.Context) ([]string, error)
}
