package plugin

import (
	"errors"
	"fmt"
	"time"
)

// BlockedError reports that an item cannot be deleted yet: it is locked, or
// something still depends on it. The host queues the item for a retry no
// sooner than RetryAfter.
type BlockedError struct {
	RetryAfter time.Duration
	Reason     string
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("blocked (retry after %s): %s", e.RetryAfter, e.Reason)
}

// Blocked returns an error that marks the item as blocked for now. The host
// retries it no sooner than retryAfter (0 lets the host choose).
func Blocked(retryAfter time.Duration, reason string) error {
	if retryAfter < 0 {
		retryAfter = 0
	}
	return &BlockedError{RetryAfter: retryAfter, Reason: reason}
}

// SkippedError reports that the action chose not to act on the item.
type SkippedError struct {
	Reason string
}

func (e *SkippedError) Error() string { return "skipped: " + e.Reason }

// Skipped returns an error that marks the item as skipped.
func Skipped(reason string) error {
	return &SkippedError{Reason: reason}
}

// Outcome is what happened to one item.
type Outcome int

// The outcomes of Execute.
const (
	OutcomeDone Outcome = iota + 1
	OutcomeBlocked
	OutcomeFailed
	OutcomeSkipped
)

func (o Outcome) String() string {
	switch o {
	case OutcomeDone:
		return "done"
	case OutcomeBlocked:
		return "blocked"
	case OutcomeFailed:
		return "failed"
	case OutcomeSkipped:
		return "skipped"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}

// Result is the classified result of one Execute call.
type Result struct {
	Outcome    Outcome
	Message    string
	RetryAfter time.Duration
}

// Classify turns the error returned by Execute into a Result.
func Classify(err error) Result {
	if err == nil {
		return Result{Outcome: OutcomeDone}
	}
	var b *BlockedError
	if errors.As(err, &b) {
		return Result{Outcome: OutcomeBlocked, Message: b.Reason, RetryAfter: b.RetryAfter}
	}
	var s *SkippedError
	if errors.As(err, &s) {
		return Result{Outcome: OutcomeSkipped, Message: s.Reason}
	}
	return Result{Outcome: OutcomeFailed, Message: err.Error()}
}
