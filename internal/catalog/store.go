package catalog

import (
	"context"
	"time"
)

// Store is the catalog. Every method is safe for concurrent use. Every
// lifecycle method appends an audit entry and a change-feed event in the
// same transaction as its write.
type Store interface {
	// Create inserts a resource in phase Active (an empty UID gets a new
	// one). ErrAlreadyExists if the key is taken.
	Create(ctx context.Context, r *Resource) (*Resource, error)
	// CreateBatch creates many resources in one transaction, all or
	// nothing (bulk loads, imports). Each resource gets its own
	// resourceVersion, ADDED event and audit entry, as with Create.
	CreateBatch(ctx context.Context, rs []*Resource) ([]*Resource, error)
	Get(ctx context.Context, k Key) (*Resource, error)
	GetByUID(ctx context.Context, uid string) (*Resource, error)
	List(ctx context.Context, opts ListOptions) (*ListResult, error)
	// Update writes labels, annotations, owners, references, finalizers,
	// conditions, spec and status. r.ResourceVersion must match the stored
	// one (ErrConflict otherwise). Phase and deletion fields are changed
	// only by the lifecycle methods; a finalizer cannot be added to a
	// Deleting resource.
	Update(ctx context.Context, r *Resource) (*Resource, error)

	// Schedule: Active → Scheduled, due at now+Delay; sets the
	// lethe.io/deletion-scheduled-at annotation to now (RFC 3339).
	Schedule(ctx context.Context, k Key, opts ScheduleOptions) (*Resource, error)
	// Undelete: Scheduled → Active (also after the delay expired, as long
	// as the resource has not entered Deleting); clears the annotation.
	Undelete(ctx context.Context, k Key, actor, reason string) (*Resource, error)
	// Delete: Active or Scheduled → Deleting (irreversible). Sets the
	// deletion timestamp and adds opts.Finalizers; the propagation policy
	// is opts' (else Schedule's, else Foreground).
	Delete(ctx context.Context, k Key, opts DeleteOptions) (*Resource, error)
	// RemoveFinalizer removes one finalizer of a Deleting resource
	// (*TransitionError in other phases). Removing an absent finalizer
	// is a no-op that returns the resource unchanged.
	RemoveFinalizer(ctx context.Context, k Key, finalizer, actor string) (*Resource, error)
	// Purge: Deleting with no finalizers → gone, leaving a Tombstone. Only
	// a Deleting resource can be purged; Force skips remaining finalizers.
	Purge(ctx context.Context, k Key, opts PurgeOptions) error
	// DueScheduled returns Scheduled resources due at or before t, oldest
	// first, from an index.
	DueScheduled(ctx context.Context, t time.Time, limit int) ([]*Resource, error)
	// NextDue returns the earliest due time of any Scheduled resource.
	NextDue(ctx context.Context) (time.Time, bool, error)
	// GetTombstone returns the tombstone of a purged resource.
	GetTombstone(ctx context.Context, k Key) (*Tombstone, error)

	// Dependents lists resources with an owner edge to uid.
	Dependents(ctx context.Context, ownerUID string) ([]*Resource, error)
	// Referrers lists resources with a reference to the target.
	Referrers(ctx context.Context, target Key) ([]*Resource, error)

	// Enqueue adds a work item, or returns the existing one for the same
	// (queue, key).
	Enqueue(ctx context.Context, w WorkItem) (*WorkItem, error)
	// Claim leases up to limit due, unleased (or lease-expired) items;
	// each claim increments Attempts.
	Claim(ctx context.Context, queue, holder string, ttl time.Duration, limit int) ([]*WorkItem, error)
	// ClaimKey leases one item by key; *LeaseHeldError if another holder
	// has a live lease, ErrNotFound if there is no such item.
	ClaimKey(ctx context.Context, queue, key, holder string, ttl time.Duration) (*WorkItem, error)
	// Renew extends a live lease; ErrLeaseLost if holder no longer holds
	// it or it has expired.
	Renew(ctx context.Context, id int64, holder string, ttl time.Duration) (*WorkItem, error)
	// Release gives a lease up, setting the next run time and last error.
	Release(ctx context.Context, id int64, holder string, runAt time.Time, lastErr string) error
	// Complete removes a finished work item. Release and Complete fail
	// with ErrLeaseLost only if another holder has taken the item over.
	Complete(ctx context.Context, id int64, holder string) error
	GetWork(ctx context.Context, queue, key string) (*WorkItem, error)
	ListWork(ctx context.Context, queue string) ([]*WorkItem, error)

	// Watch streams change events after opts.FromVersion, in order. The
	// channel closes when ctx ends or the subscription fails (see Err on
	// the returned Subscription).
	Watch(ctx context.Context, opts WatchOptions) (Subscription, error)
	// CurrentVersion is the newest resourceVersion.
	CurrentVersion(ctx context.Context) (int64, error)

	// Deletion progress of a backup (see DeletionProgress).
	SaveCheckpoint(ctx context.Context, c Checkpoint) error
	LoadProgress(ctx context.Context, uid string) (*DeletionProgress, []ItemOutcome, error)
	DeleteProgress(ctx context.Context, uid string) error

	AppendAudit(ctx context.Context, e AuditEntry) error
	// ListAudit returns matching entries oldest first; with f.Limit, the
	// newest f.Limit of them (still oldest first).
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error)

	Close() error
}

// Subscription is a change-feed subscription.
type Subscription interface {
	Events() <-chan Event
	// Err is the reason the channel closed, nil after a clean stop.
	Err() error
	Close() error
}
