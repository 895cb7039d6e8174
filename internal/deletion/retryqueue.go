package deletion

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// The retry queue (internal/retry) decides when the failed and blocked
// items of a backup are sent again, and when they are given up: after a
// run that left items unsettled, each of them is recorded as an attempt
// of its row (KindBackupItem, at its plugin); rows whose items settled
// are removed. The deletion's work item is then parked: the daemon's
// retry collector runs the deletion again when its rows are due (see
// internal/server), and an explicit `backup delete` claims it by key at
// any time. A run that failed as a whole (storage unreachable, a plugin
// that cannot start) keeps the work item's own backoff (retryAt).

// defaultRetry gives a Config without a queue one with the default
// policy, over Store.
func (c *Config) defaultRetry() error {
	if c.Retry != nil {
		return nil
	}
	st, ok := c.Store.(retry.Catalog)
	if !ok {
		return errors.New("deletion: Config.Retry is required when Config.Store is not a retry.Catalog")
	}
	var q *retry.Queue
	now := c.Now
	if now == nil {
		now = time.Now
	}
	q, err := retry.New(&retry.Config{Store: st, Logger: c.Logger, Now: c.Now,
		OwnerSync: map[string]func(context.Context, string) error{
			retry.KindBackupItem: SyncStuck(st, func() *retry.Queue { return q }, now),
			retry.KindLocation:   SyncStuck(st, func() *retry.Queue { return q }, now),
		}})
	if err != nil {
		return err
	}
	c.Retry = q
	return nil
}

// ItemID is the retry-queue item id of a backup item.
func ItemID(o catalog.ItemOutcome) string { return fmt.Sprintf("%d:%s", o.Ordinal, o.ItemKey) }

// nextRun is when the deletion's work item is due again after a run
// that did not purge.
func (d *Deleter) nextRun(ctx context.Context, b *backup.Backup, rep *Report, runErr error, w *catalog.WorkItem) time.Time {
	if runErr != nil || rep == nil || rep.Result != ResultIncomplete {
		return d.retryAt(rep, w)
	}
	if err := d.queueUnsettled(ctx, b); err != nil {
		d.log.Warn("recording unsettled items in the retry queue; the deletion retries as a whole", "backup", b.Name(), "error", err)
		return d.retryAt(rep, w)
	}
	return d.now().Add(ParkedFor)
}

// queueUnsettled records every unsettled item of the backup as an
// attempt, and removes the rows of items now settled.
func (d *Deleter) queueUnsettled(ctx context.Context, b *backup.Backup) error {
	r := b.Resource
	_, rows, err := d.cfg.Store.LoadProgress(ctx, r.UID)
	if err != nil {
		return err
	}
	now := d.now()
	outs := make([]retry.Outcome, len(rows))
	live := make(map[catalog.RetryIdentity]bool, len(rows))
	for i, o := range rows {
		var after time.Duration
		if o.Outcome == "blocked" && !o.NextAttemptAt.IsZero() {
			after = max(o.NextAttemptAt.Sub(now), 0)
		}
		outs[i] = retry.Outcome{Kind: retry.KindBackupItem, Owner: r.Key(), UID: r.UID, ItemID: ItemID(o), Plugin: o.Plugin,
			Result: o.Outcome, Message: o.Message, RetryAfter: after}
		live[outs[i].Identity()] = true
	}
	if _, err := d.cfg.Retry.Record(ctx, outs...); err != nil {
		return err
	}
	return d.settleQueued(ctx, r, live)
}

// settleQueued removes the rows of the backup's items that are not in
// live any more (their plugin finished with them).
func (d *Deleter) settleQueued(ctx context.Context, r *catalog.Resource, live map[catalog.RetryIdentity]bool) error {
	queued, err := d.cfg.Retry.List(ctx, catalog.RetryFilter{Key: r.Key().String(), Kind: retry.KindBackupItem})
	if err != nil {
		return err
	}
	done := []catalog.RetryIdentity{}
	for _, q := range queued {
		if !live[q.RetryIdentity] {
			done = append(done, q.RetryIdentity)
		}
	}
	return d.cfg.Retry.Succeed(ctx, r.Key(), r.UID, slices.Clip(done))
}

// retryFinished forgets the rows of a purged backup; an abandoned one
// (a forced purge) gets the Abandoned event.
func (d *Deleter) retryFinished(ctx context.Context, b *backup.Backup, rep *Report) {
	if err := d.cfg.Retry.Finish(ctx, b.Resource.Key(), b.Resource.UID, rep.Forced); err != nil {
		d.log.Warn("clearing the retry queue of a purged backup", "backup", b.Name(), "error", err)
	}
}

// backupStuck is a backup's DeletionStuck condition. The deletion
// pipeline is its one writer: after each run (updateStatus), and when
// the retry queue changes the backup's rows (SyncStuck, the queue's
// OwnerSync for backup items). A dead letter in the queue makes it
// RetriesExhausted (or Discarded), with the row's history; otherwise
// items the last run left unsettled make it ItemsUnsettled; otherwise it
// is False.
func backupStuck(ctx context.Context, q *retry.Queue, r *catalog.Resource, ds *backup.DeletionStatus, now time.Time) catalog.Condition {
	if q != nil {
		rows, err := q.List(ctx, catalog.RetryFilter{OwnerUID: r.UID, State: catalog.RetryDiscarded})
		if err == nil && len(rows) > 0 {
			reason, msg := retry.DeadLetterReason(r, rows)
			return catalog.Condition{Type: retry.ConditionDeletionStuck, Status: "True", Reason: reason, Message: msg, LastTransitionTime: now}
		}
	}
	cond := catalog.Condition{Type: retry.ConditionDeletionStuck, Status: "False", Reason: "AllSettled", LastTransitionTime: now}
	if ds != nil && (ds.Unsettled > 0 || ds.LastError != "") {
		cond.Status, cond.Reason = "True", "ItemsUnsettled"
		cond.Message = cmp.Or(ds.LastError, plural(int(ds.Unsettled), "item")+" failed or blocked; they wait in the retry queue (lethe retry list), or run the delete again to retry them now")
	}
	return cond
}

// SyncStuck returns what the retry queue calls when the rows of a
// backup changed (retry.Config.OwnerSync for retry.KindBackupItem): it
// writes the backup's DeletionStuck condition again, from its rows and
// its last run's status, so that the pipeline stays its one writer.
func SyncStuck(st catalog.Resources, q func() *retry.Queue, now func() time.Time) func(ctx context.Context, uid string) error {
	return func(ctx context.Context, uid string) error {
		for range 3 {
			cur, err := st.GetByUID(ctx, uid)
			if errors.Is(err, catalog.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			b, err := backup.FromResource(cur)
			if err != nil {
				return err
			}
			want := backupStuck(ctx, q(), cur, b.Status.Deletion, now().UTC())
			i := slices.IndexFunc(cur.Conditions, func(c catalog.Condition) bool { return c.Type == want.Type })
			if i >= 0 && cur.Conditions[i].Status == want.Status && cur.Conditions[i].Reason == want.Reason && cur.Conditions[i].Message == want.Message {
				return nil
			}
			setCondition(cur, want)
			if _, err := st.Update(ctx, cur); !errors.Is(err, catalog.ErrConflict) {
				return err
			}
		}
		return nil
	}
}

// Retry is the Deleter's retry queue.
func (d *Deleter) Retry() *retry.Queue { return d.cfg.Retry }
