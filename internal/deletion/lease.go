package deletion

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

// ParkedFor is how far ahead the work item of a deletion whose tarball is
// missing or replaced is put off: in effect, until an explicit delete.
const ParkedFor = 50 * 365 * 24 * time.Hour

// The range a plugin's retryAfter (plugin.Blocked) is held to. Zero means
// "use the backoff"; anything else outside the range is clamped, and
// logged once per plugin per run.
const (
	RetryAfterMin = time.Minute
	RetryAfterMax = 24 * time.Hour
)

// retryAt is when the daemon should try an unfinished deletion again: the
// earliest retry time a blocked item asked for, or a backoff that grows
// with the attempts, capped at an hour; never sooner than RetryAfterMin
// from now, so that no plugin can make the daemon spin.
func (d *Deleter) retryAt(rep *Report, w *catalog.WorkItem) time.Time {
	now := d.now()
	backoff := min(time.Duration(1<<min(w.Attempts, 6))*time.Minute, time.Hour)
	next := now.Add(backoff)
	if rep != nil {
		for _, o := range rep.Unsettled {
			if o.Outcome == "blocked" && !o.NextAttemptAt.IsZero() && o.NextAttemptAt.Before(next) {
				next = o.NextAttemptAt
			}
		}
	}
	return maxTime(next, now.Add(RetryAfterMin))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// clampRetryAfter holds a plugin's retryAfter to [RetryAfterMin,
// RetryAfterMax]; zero stays zero (the backoff decides). clamped says
// whether the value was out of range.
func clampRetryAfter(after time.Duration) (_ time.Duration, clamped bool) {
	switch {
	case after == 0:
		return 0, false
	case after < RetryAfterMin:
		return RetryAfterMin, true
	case after > RetryAfterMax:
		return RetryAfterMax, true
	}
	return after, false
}

// keepLease renews the lease every third of its TTL until ctx ends. A
// renewal that fails for a transient reason (the database briefly away)
// is retried sooner, for as long as the lease has not expired; a lease
// lost (expired, or claimed again) cancels the run, which then stops
// before its next write (every write is fenced anyway).
func (d *Deleter) keepLease(ctx context.Context, cancel context.CancelCauseFunc, w *catalog.WorkItem) <-chan struct{} {
	done := make(chan struct{})
	fence := w.Fence()
	expires := w.LeaseExpiresAt
	every, retry := d.cfg.LeaseTTL/3, max(d.cfg.LeaseTTL/20, 10*time.Millisecond)
	go func() {
		defer close(done)
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			tick := t.C
			if d.hooks.renewTick != nil {
				tick = d.hooks.renewTick
			}
			select {
			case <-ctx.Done():
				return
			case <-tick:
			}
			cur, err := d.cfg.Store.Renew(ctx, fence, d.cfg.LeaseTTL)
			switch {
			case err == nil:
				expires = cur.LeaseExpiresAt
				t.Reset(every)
			case ctx.Err() != nil:
				return
			case errors.Is(err, catalog.ErrLeaseLost):
				cancel(fmt.Errorf("lost the deletion lease: %w", err))
				return
			case !d.now().Before(expires):
				cancel(fmt.Errorf("lost the deletion lease: it expired at %s while renewing it failed: %w: %w",
					expires.Format(time.RFC3339), err, catalog.ErrLeaseLost))
				return
			default:
				d.log.Warn("renewing the deletion lease failed; retrying before it expires", "expires", expires, "error", err)
				t.Reset(retry)
			}
		}
	}()
	return done
}

// checkFence renews the run's lease, proving that its claim is still the
// latest, right before a write outside the catalog (the tarball), which
// no transaction can fence.
func (d *Deleter) checkFence(ctx context.Context) error {
	f := catalog.FenceFrom(ctx)
	if f == nil {
		return nil
	}
	_, err := d.cfg.Store.Renew(ctx, f, d.cfg.LeaseTTL)
	return err
}
