package server

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/retry"
)

// The retry queue in the daemon: a collector claims due rows with leases
// and runs them (backup items: the backup's deletion, by key; catalog
// resources and their waits: a step of the garbage collector), and a
// notifier delivers the outbox to the webhooks.

// retryParts builds the collector and, when a secret is configured, the
// notifier; both wake when the queue records something in this process.
func (s *Server) retryParts() (*retry.Collector, *retry.Notifier, error) {
	q := s.cfg.Deleter.Retry()
	handlers := map[string]retry.Handler{retry.KindBackupItem: s.runBackupRetry, retry.KindLocation: s.runLocationRetry}
	if s.cfg.Collector != nil {
		// Catalog resources: the queue says when, the garbage collector
		// steps the resource (its plugins, its waits).
		handlers[retry.KindResource] = s.cfg.Collector.RetryHandler()
		handlers[retry.KindWait] = s.cfg.Collector.RetryHandler()
	}
	col, err := retry.NewCollector(&retry.CollectorConfig{
		Queue: q, Holder: s.cfg.Deleter.Holder(), Logger: s.cfg.Logger, LeaseTTL: s.cfg.RetryLeaseTTL,
		Handlers: handlers,
	})
	if err != nil {
		return nil, nil, err
	}
	var nt *retry.Notifier
	for _, id := range q.Webhooks() {
		if !slices.ContainsFunc(s.cfg.NotifyWebhooks, func(w retry.Webhook) bool { return w.ID() == id }) {
			return nil, nil, fmt.Errorf("--notify-webhook %q needs a secret to sign its notifications: URL,secret-file=FILE", id)
		}
	}
	if len(s.cfg.NotifyWebhooks) > 0 {
		audit, _ := q.Store().(catalog.Audit) // every catalog driver's store is one
		nt, err = retry.NewNotifier(&retry.NotifierConfig{
			Store: q.Store(), Audit: audit, Webhooks: s.cfg.NotifyWebhooks, Timeout: s.cfg.NotifyTimeout,
			Holder: s.cfg.Deleter.Holder(), Logger: s.cfg.Logger, Metrics: s.retryMetrics, Now: s.cfg.Now,
		})
		if err != nil {
			return nil, nil, err
		}
	}
	q.Attach(s.retryMetrics, func() {
		col.Wake()
		if nt != nil {
			nt.Wake()
		}
	})
	return col, nt, nil
}

// runBackupRetry runs the deletion of the backup whose items are due. The
// items of one backup are sent again together, in one pass over its
// tarball, once the latest of its waiting rows is due: no plugin is asked
// again before the retryAfter it gave.
func (s *Server) runBackupRetry(ctx context.Context, rows []*catalog.RetryRow) error {
	q := s.cfg.Deleter.Retry()
	uid := rows[0].OwnerUID
	r, err := s.cfg.Store.GetByUID(ctx, uid)
	if errors.Is(err, catalog.ErrNotFound) || (err == nil && r.Phase != catalog.PhaseDeleting) {
		// Purged, or no longer being deleted: nothing to retry.
		key := rows[0].Key
		_, err := q.Store().DeleteRetries(ctx, key, nil)
		return err
	}
	if err != nil {
		return err
	}
	waiting, err := q.List(ctx, catalog.RetryFilter{OwnerUID: uid, State: catalog.RetryRetryable})
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	latest := now
	for _, w := range waiting {
		if w.NextAttemptAt.After(latest) && !slices.ContainsFunc(rows, func(c *catalog.RetryRow) bool { return c.ID == w.ID }) {
			latest = w.NextAttemptAt
		}
	}
	if latest.After(now) {
		return &retry.DeferError{Until: latest, Reason: "the items of one backup are retried together, when the last of them is due"}
	}
	rep, err := s.cfg.Deleter.Run(ctx, r.Name, deletion.Options{NoPlugins: s.cfg.NoPlugins, Unattended: true})
	s.notePluginMissing(uid, err)
	var held *catalog.LeaseHeldError
	if errors.As(err, &held) {
		return &retry.DeferError{Until: held.ExpiresAt, Reason: "its deletion is running in " + held.Holder}
	}
	if err != nil {
		s.m.deletions.WithLabelValues("error").Inc()
		return err
	}
	s.m.deletions.WithLabelValues(string(rep.Result)).Inc()
	s.log.Info("retried deletion ran", "backup", rep.Backup, "result", rep.Result, "unsettled", rep.UnsettledCount)
	return nil
}

// runLocationRetry looks again at a deletion parked because its storage
// location was unavailable (Deleter.RecheckLocation): still unavailable,
// its row is put off on the queue's backoff, without an attempt and
// without claiming the deletion's work item; back, the deletion runs.
func (s *Server) runLocationRetry(ctx context.Context, rows []*catalog.RetryRow) error {
	r, err := s.cfg.Store.GetByUID(ctx, rows[0].OwnerUID)
	if errors.Is(err, catalog.ErrNotFound) || (err == nil && r.Phase != catalog.PhaseDeleting) {
		// Purged, or no longer being deleted: nothing waits any more.
		_, err := s.cfg.Deleter.Retry().Store().DeleteRetries(ctx, rows[0].Key, nil)
		return err
	}
	if err != nil {
		return err
	}
	rep, err := s.cfg.Deleter.RecheckLocation(ctx, rows[0].OwnerUID, deletion.Options{NoPlugins: s.cfg.NoPlugins, Unattended: true})
	s.notePluginMissing(rows[0].OwnerUID, err)
	var held *catalog.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return &retry.DeferError{Until: held.ExpiresAt, Reason: "its deletion is running in " + held.Holder}
	case err != nil:
		s.m.deletions.WithLabelValues("error").Inc()
		return err
	case rep == nil:
		return nil // still waiting (its row was refreshed), or gone
	}
	s.m.deletions.WithLabelValues(string(rep.Result)).Inc()
	s.log.Info("deletion resumed: its storage location is back", "backup", rep.Backup, "result", rep.Result, "unsettled", rep.UnsettledCount)
	return nil
}
