package storageloc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
)

// Kind is the catalog kind of a location's recorded state.
const Kind = "BackupStorageLocation"

// Status is what was last seen of a location: by the server's periodic
// check and sync, or by `lethe backup sync`.
type Status struct {
	Phase         string     `json:"phase,omitempty"`
	LastCheckTime *time.Time `json:"lastCheckTime,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
	LastSyncTime  *time.Time `json:"lastSyncTime,omitempty"`
}

// Check reads the location now: Available when it opens and answers,
// else Unavailable with the reason (never a credential).
func Check(ctx context.Context, locs *blobstore.Locations, l Location) (blobstore.Store, error) {
	s, err := locs.Open(ctx, l.URL)
	if err != nil {
		return nil, err
	}
	if err := blobstore.Check(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// Load returns the recorded state of the location named name, or nil.
func Load(ctx context.Context, st catalog.Resources, name string) (*Status, error) {
	r, err := st.Get(ctx, catalog.Key{Kind: Kind, Name: name})
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s Status
	if len(r.Status) > 0 {
		if err := json.Unmarshal(r.Status, &s); err != nil {
			return nil, fmt.Errorf("location %s: recorded status: %w", name, err)
		}
	}
	return &s, nil
}

// Record updates the recorded state of l with set, creating it the first
// time. With a leader's fenced context, the write carries its term.
func Record(ctx context.Context, st catalog.Resources, l Location, set func(*Status)) error {
	k := catalog.Key{Kind: Kind, Name: l.Name}
	for range 3 {
		r, err := st.Get(ctx, k)
		create := errors.Is(err, catalog.ErrNotFound)
		if err != nil && !create {
			return err
		}
		var s Status
		if create {
			r = &catalog.Resource{Kind: Kind, Name: l.Name}
		} else if len(r.Status) > 0 {
			_ = json.Unmarshal(r.Status, &s) // a bad record is overwritten
		}
		set(&s)
		spec, _ := json.Marshal(map[string]any{"url": l.URL, "readOnly": l.ReadOnly, "default": l.Default})
		r.Spec = spec
		if r.Status, err = json.Marshal(s); err != nil {
			return err
		}
		if create {
			_, err = st.Create(ctx, r)
			if errors.Is(err, catalog.ErrAlreadyExists) {
				continue
			}
			return err
		}
		_, err = st.Update(ctx, r)
		if !errors.Is(err, catalog.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("location %s: recording its state: %w", l.Name, catalog.ErrConflict)
}

// Checked records a check's outcome at now.
func Checked(now time.Time, err error) func(*Status) {
	return func(s *Status) {
		t := now.UTC().Truncate(time.Second)
		s.LastCheckTime = &t
		s.Phase, s.LastError = PhaseAvailable, ""
		if err != nil {
			s.Phase, s.LastError = PhaseUnavailable, err.Error()
		}
	}
}

// Synced records a sync that finished at now.
func Synced(now time.Time) func(*Status) {
	return func(s *Status) {
		t := now.UTC().Truncate(time.Second)
		s.LastSyncTime = &t
	}
}
