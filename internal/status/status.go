// Package status reads the one-screen summary that lethe status prints:
// resources by kind and phase, the backup deletions in flight with their
// progress and rate, the storage locations as last checked, the work
// queues, the retry queue and the leader.
// It only reads the catalog, with aggregate queries and one listing of
// the backups being deleted.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/leader"
	"github.com/lethehq/lethe/internal/storageloc"
)

// Store is the part of the catalog the summary reads.
type Store interface {
	catalog.Counts
	catalog.Resources
	catalog.Progress
	catalog.RetryQueue
	catalog.Leadership
}

// Summary is the state of the catalog at Time.
type Summary struct {
	Time time.Time `json:"time"`
	// Resources counts each kind's resources by phase (kinds with none
	// left are not listed).
	Resources map[string]PhaseCounts `json:"resources"`
	// Deletions are the backups being deleted, oldest first.
	Deletions []Deletion `json:"deletions"`
	// Queues count the work queues' items by state: deletion (backups)
	// and gc (the cascade collector).
	Queues map[string]catalog.WorkCounts `json:"queues"`
	// Retry counts the retry queue's rows by state; discarded rows are
	// the dead letters.
	Retry RetryCounts `json:"retry"`
	// Leader is the lethe server leader lease; nil if no server ever ran.
	Leader *Leader `json:"leader,omitempty"`
	// Locations are the storage locations as the catalog last recorded
	// them (lethe server's periodic check and sync, or lethe backup
	// sync), by name; the summary does not reach storage itself.
	Locations []Location `json:"locations"`
}

// Location is a storage location's recorded state.
type Location struct {
	Name string `json:"name"`
	storageloc.Status
}

// PhaseCounts counts resources by phase.
type PhaseCounts struct {
	Active    int64 `json:"active"`
	Scheduled int64 `json:"scheduled"`
	Deleting  int64 `json:"deleting"`
}

// Deletion is one backup being deleted.
type Deletion struct {
	Name      string     `json:"name"`
	UID       string     `json:"uid"`
	StartedAt *time.Time `json:"startedAt,omitempty"`
	// Watermark items of TotalItems went through every plugin; 0 of 0
	// before the first checkpoint.
	Watermark  int64 `json:"watermark"`
	TotalItems int64 `json:"totalItems"`
	// Unsettled items failed or are blocked (they wait in the retry
	// queue).
	Unsettled int64 `json:"unsettled"`
	// ItemsPerSecond is the rate since the previous summary, or, for the
	// first, since the deletion began; 0 when unknown.
	ItemsPerSecond float64 `json:"itemsPerSecond"`
	// Conditions are the True conditions that hold the deletion up
	// (DeletionStuck, PluginMissing, TarballMissing, ...).
	Conditions []string   `json:"conditions,omitempty"`
	UpdatedAt  *time.Time `json:"updatedAt,omitempty"`
}

// RetryCounts counts the retry queue's rows by state.
type RetryCounts struct {
	Retryable int64 `json:"retryable"`
	Running   int64 `json:"running"`
	Discarded int64 `json:"discarded"`
}

// Leader is the leader lease.
type Leader struct {
	Holder string `json:"holder,omitempty"` // empty: resigned
	Term   int64  `json:"term"`
	// Live: the holder holds it at Summary.Time (it has not expired).
	Live      bool      `json:"live"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Read reads the summary at now. prev, the previous summary (nil for the
// first), gives each deletion's rate over the time between them.
func Read(ctx context.Context, st Store, now time.Time, prev *Summary) (*Summary, error) {
	s := &Summary{Time: now, Resources: map[string]PhaseCounts{}, Deletions: []Deletion{}, Queues: map[string]catalog.WorkCounts{}}
	kinds, err := st.Kinds(ctx)
	if err != nil {
		return nil, err
	}
	for _, k := range kinds {
		byPhase, err := st.CountByPhase(ctx, k)
		if err != nil {
			return nil, err
		}
		c := PhaseCounts{Active: byPhase[catalog.PhaseActive], Scheduled: byPhase[catalog.PhaseScheduled], Deleting: byPhase[catalog.PhaseDeleting]}
		if c != (PhaseCounts{}) {
			s.Resources[k] = c
		}
	}
	for _, q := range []string{deletion.Queue, gc.Queue} {
		if s.Queues[q], err = st.CountWork(ctx, q); err != nil {
			return nil, err
		}
	}
	retries, err := st.CountRetries(ctx)
	if err != nil {
		return nil, err
	}
	s.Retry = RetryCounts{Retryable: retries[catalog.RetryRetryable], Running: retries[catalog.RetryRunning], Discarded: retries[catalog.RetryDiscarded]}
	l, err := st.GetLeader(ctx, leader.NameDefault)
	switch {
	case err == nil:
		s.Leader = &Leader{Holder: l.Holder, Term: l.Term, Live: l.HeldBy(l.Holder, now), ExpiresAt: l.ExpiresAt}
	case !errors.Is(err, catalog.ErrNotFound):
		return nil, err
	}
	if s.Locations, err = readLocations(ctx, st); err != nil {
		return nil, err
	}
	if s.Resources[backup.Kind].Deleting > 0 {
		if err := s.readDeletions(ctx, st, prev); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Summary) readDeletions(ctx context.Context, st Store, prev *Summary) error {
	before := map[string]Deletion{}
	if prev != nil {
		for _, d := range prev.Deletions {
			before[d.UID] = d
		}
	}
	opts := catalog.ListOptions{Kind: backup.Kind, Phase: catalog.PhaseDeleting}
	for {
		page, err := st.List(ctx, opts)
		if err != nil {
			return err
		}
		for _, r := range page.Items {
			d := Deletion{Name: r.Name, UID: r.UID, StartedAt: r.DeletionTimestamp}
			for _, c := range r.Conditions {
				if c.Status == "True" {
					d.Conditions = append(d.Conditions, c.Type)
				}
			}
			p, _, err := st.LoadProgress(ctx, r.UID)
			switch {
			case err == nil:
				d.Watermark, d.TotalItems, d.UpdatedAt = p.Watermark, p.TotalItems, &p.UpdatedAt
				for _, name := range slices.Sorted(maps.Keys(p.Counts)) {
					d.Unsettled += p.Counts[name].Failed + p.Counts[name].Blocked
				}
			case !errors.Is(err, catalog.ErrNotFound):
				return err
			}
			d.ItemsPerSecond = rate(d, before[r.UID], prev, s.Time)
			s.Deletions = append(s.Deletions, d)
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	slices.SortStableFunc(s.Deletions, func(a, b Deletion) int {
		if a.StartedAt == nil || b.StartedAt == nil {
			return 0
		}
		return a.StartedAt.Compare(*b.StartedAt)
	})
	return nil
}

// rate is d's items per second: over the time since the previous summary
// when it saw the same deletion, else since the deletion began (to its
// last checkpoint).
func rate(d, was Deletion, prev *Summary, now time.Time) float64 {
	if prev != nil && was.UID != "" {
		if secs := now.Sub(prev.Time).Seconds(); secs > 0 && d.Watermark >= was.Watermark {
			return float64(d.Watermark-was.Watermark) / secs
		}
		return 0
	}
	if d.StartedAt == nil || d.UpdatedAt == nil {
		return 0
	}
	if secs := d.UpdatedAt.Sub(*d.StartedAt).Seconds(); secs > 0 {
		return float64(d.Watermark) / secs
	}
	return 0
}

// readLocations lists the recorded storage locations, by name. A record
// that cannot be read is shown with its error: a location's state is
// never guessed.
func readLocations(ctx context.Context, st Store) ([]Location, error) {
	out := []Location{}
	opts := catalog.ListOptions{Kind: storageloc.Kind}
	for {
		page, err := st.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Items {
			l := Location{Name: r.Name}
			if len(r.Status) > 0 {
				if err := json.Unmarshal(r.Status, &l.Status); err != nil {
					l.Status = storageloc.Status{LastError: "recorded state cannot be read: " + err.Error()}
				}
			}
			out = append(out, l)
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	slices.SortFunc(out, func(a, b Location) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
