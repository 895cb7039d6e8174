package catalog

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Drivers wrap these; callers test with errors.Is.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	// ErrConflict: the resourceVersion did not match (optimistic concurrency).
	ErrConflict = errors.New("conflict: the resource was modified; reload and retry")
	// ErrInvalidTransition: the lifecycle does not allow the change.
	ErrInvalidTransition = errors.New("invalid lifecycle transition")
	// ErrLeaseHeld: another holder has a live lease on the work item.
	ErrLeaseHeld = errors.New("lease held by another holder")
	// ErrLeaseLost: the caller no longer holds the lease it used.
	ErrLeaseLost = errors.New("lease lost")
	// ErrStaleTerm: a write fenced by a leader term (WithLeaderFence)
	// was refused because that term is over (see StaleTermError).
	ErrStaleTerm = errors.New("leader term is over")
	// ErrSchemaTooNew: the database was migrated by a newer Lethe.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
	// ErrInvalid: the input is malformed (bad name, selector, JSON).
	ErrInvalid = errors.New("invalid input")
	// ErrDiskFull: the catalog's disk (SQLite's file system, or the
	// PostgreSQL server's) is full; the write was rolled back whole, and
	// writes succeed again once there is space.
	ErrDiskFull = errors.New("the catalog's disk is full: nothing was written; writes resume once space is freed")
	// ErrClosed: the store was closed (e.g. the Err of a subscription
	// that Store.Close ended).
	ErrClosed = errors.New("catalog store closed")
)

// TransitionError is returned for an illegal lifecycle change.
type TransitionError struct {
	Key    Key
	From   Phase
	To     Phase
	Reason string
}

func (e *TransitionError) Error() string {
	msg := fmt.Sprintf("%s: cannot go from %s to %s", e.Key, e.From, e.To)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrInvalidTransition) true.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// LeaseHeldError says who holds a work item's lease, and until when.
type LeaseHeldError struct {
	Queue     string
	Key       string
	Holder    string
	ExpiresAt time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("%s %s is held by %s until %s", e.Queue, e.Key, e.Holder, e.ExpiresAt.Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrLeaseHeld) true.
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// StaleTermError refuses a write fenced by a leader term that is over:
// another replica took the lease over, or it lapsed. Current is the lease
// as the refusing transaction found it (nil if it was never taken).
type StaleTermError struct {
	Fence   LeaderFence
	Current *LeaderLease
}

func (e *StaleTermError) Error() string {
	msg := fmt.Sprintf("%s: lease %s, term %d of %q", ErrStaleTerm, e.Fence.Name, e.Fence.Term, e.Fence.Holder)
	switch c := e.Current; {
	case c == nil:
		msg += " (the lease was never taken)"
	case c.Term != e.Fence.Term || c.Holder != e.Fence.Holder:
		msg += fmt.Sprintf(" (now term %d of %q)", c.Term, c.Holder)
	default:
		msg += " (it lapsed at " + c.ExpiresAt.Format(time.RFC3339Nano) + ")"
	}
	return msg + "; the write was refused"
}

// Unwrap makes errors.Is(err, ErrStaleTerm) true.
func (e *StaleTermError) Unwrap() error { return ErrStaleTerm }

// DiskReporter is a store that remembers when a write last failed with
// ErrDiskFull (the zero time: never, or a write committed since), so that
// a server can say so in its readiness while the disk stays full.
type DiskReporter interface {
	LastDiskFull() time.Time
}
