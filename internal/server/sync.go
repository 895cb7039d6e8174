package server

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lethehq/lethe/internal/catalog"
)

// SyncIntervalDefault is how often the leader syncs storage: Velero's
// own default (--backup-sync-period, one minute).
const SyncIntervalDefault = time.Minute

// SyncSummary counts one sync's outcomes.
type SyncSummary struct {
	Imported, Updated, Rejected, Missing, Found int
}

// SyncFunc imports what storage holds and the catalog does not, through
// the sync filter (registry.Registry.Sync). It runs with the leader's
// fenced context: every catalog write it makes carries the leader's term.
type SyncFunc func(ctx context.Context) (SyncSummary, error)

// syncMetrics are the storage sync's metrics, set by the leader.
type syncMetrics struct {
	runs    *prometheus.CounterVec
	missing prometheus.Gauge
	last    prometheus.Gauge
}

func newSyncMetrics(r *prometheus.Registry) *syncMetrics {
	m := &syncMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lethe_storage_syncs_total", Help: "Storage syncs this replica ran as the leader, by result (ok, error).",
		}, []string{"result"}),
		missing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lethe_backups_missing_from_storage",
			Help: "Backups whose tarball the last successful sync did not find in their storage location (condition MissingFromStorage); set by the leader.",
		}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lethe_storage_last_sync_timestamp_seconds", Help: "When this replica last finished a storage sync without error (Unix time).",
		}),
	}
	m.runs.WithLabelValues("ok")
	m.runs.WithLabelValues("error")
	r.MustRegister(m.runs, m.missing, m.last)
	return m
}

// syncLoop syncs storage at once and then every Config.SyncInterval, on
// the leader only, with lctx (fenced by the leader's term). A failed sync
// is logged and counted, and concludes nothing: the next one tries again.
func (s *Server) syncLoop(ctx context.Context) error {
	lastMissing := 0
	for {
		began := time.Now()
		sum, err := s.cfg.Sync(catalog.WithActor(ctx, "sync"))
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			s.syncM.runs.WithLabelValues("error").Inc()
			if errors.Is(err, catalog.ErrStaleTerm) {
				s.log.Warn("storage sync refused: this replica no longer leads", "error", err)
			} else {
				s.log.Error("storage sync failed; nothing concluded, trying again at the next interval", "error", err, "in", s.cfg.SyncInterval)
			}
		default:
			s.syncM.runs.WithLabelValues("ok").Inc()
			s.syncM.missing.Set(float64(sum.Missing))
			s.syncM.last.Set(float64(time.Now().Unix()))
			if sum.Imported+sum.Updated+sum.Rejected+sum.Found > 0 || sum.Missing != lastMissing {
				s.log.Info("storage synced", "imported", sum.Imported, "updated", sum.Updated, "rejected", sum.Rejected,
					"missing", sum.Missing, "found", sum.Found, "took", time.Since(began).Round(time.Millisecond))
			} else {
				s.log.Debug("storage synced: nothing new", "took", time.Since(began).Round(time.Millisecond))
			}
			lastMissing = sum.Missing
		}
		t := time.NewTimer(s.cfg.SyncInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
