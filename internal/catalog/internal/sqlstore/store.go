package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/catalog"
)

// Store implements catalog.Store on a Backend.
type Store struct {
	b      Backend
	d      Dialect
	now    func() time.Time
	logger hclog.Logger
	poll   time.Duration

	// closing ends every subscription when the store closes.
	closing   context.Context
	closeAll  context.CancelCauseFunc
	subs      sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	wake wakeHub

	// diskFull is when a write last failed because the catalog's disk is
	// full (Unix nanoseconds; 0: never).
	diskFull atomic.Int64
	// wrote is when a write transaction last committed.
	wrote atomic.Int64
}

var _ catalog.Store = (*Store)(nil)

// New returns a Store. cfg must have defaults filled.
func New(b Backend, cfg *catalog.Config) *Store {
	closing, closeAll := context.WithCancelCause(context.Background())
	return &Store{b: b, d: b.Dialect(), now: cfg.Now, logger: cfg.Logger, poll: cfg.PollInterval,
		closing: closing, closeAll: closeAll}
}

// Close ends every subscription (their Err is catalog.ErrClosed), waits
// for them, and closes the backend. Closing twice is a no-op.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeAll(catalog.ErrClosed)
		s.subs.Wait()
		s.closeErr = s.b.Close()
	})
	return s.closeErr
}

func (s *Store) clock() time.Time { return s.now().UTC() }

func (s *Store) mapErr(err error) error {
	if err == nil {
		return nil
	}
	err = s.b.MapError(err)
	if errors.Is(err, catalog.ErrDiskFull) {
		s.diskFull.Store(time.Now().UnixNano())
	}
	return err
}

// LastDiskFull implements catalog.DiskReporter: a write committed since
// clears it.
func (s *Store) LastDiskFull() time.Time {
	if n := s.diskFull.Load(); n != 0 && n > s.wrote.Load() {
		return time.Unix(0, n)
	}
	return time.Time{}
}

const (
	listLimitDefault = 500
	listLimitMax     = 5000
)

// --- encoding ---

func encode(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%w: %v", catalog.ErrInvalid, err)
	}
	return string(b), nil
}

func decodeResource(doc string) (*catalog.Resource, error) {
	var r catalog.Resource
	if err := json.Unmarshal([]byte(doc), &r); err != nil {
		return nil, fmt.Errorf("catalog: corrupt resource document: %w", err)
	}
	return &r, nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func clone(r *catalog.Resource) *catalog.Resource {
	c := *r
	c.Labels = maps.Clone(r.Labels)
	c.Annotations = maps.Clone(r.Annotations)
	c.Owners = slices.Clone(r.Owners)
	c.References = slices.Clone(r.References)
	c.Finalizers = slices.Clone(r.Finalizers)
	c.Conditions = slices.Clone(r.Conditions)
	c.Spec = slices.Clone(r.Spec)
	c.Status = slices.Clone(r.Status)
	return &c
}

func validateResource(r *catalog.Resource) error {
	if r == nil {
		return fmt.Errorf("%w: nil resource", catalog.ErrInvalid)
	}
	if r.Kind == "" || r.Name == "" {
		return fmt.Errorf("%w: resource needs a kind and a name (got %q)", catalog.ErrInvalid, r.Key())
	}
	for _, raw := range []json.RawMessage{r.Spec, r.Status} {
		if len(raw) > 0 && !json.Valid(raw) {
			return fmt.Errorf("%w: %s: spec or status is not valid JSON", catalog.ErrInvalid, r.Key())
		}
	}
	for _, ref := range r.References {
		switch ref.OnTargetDelete {
		case catalog.RefBlock, catalog.RefUnset, catalog.RefCascade, catalog.RefAllowDangling:
		default:
			return fmt.Errorf("%w: %s: reference to %s/%s has onTargetDelete %q (want block, unset, cascade or allowDangling)",
				catalog.ErrInvalid, r.Key(), ref.Kind, ref.Name, ref.OnTargetDelete)
		}
	}
	for _, o := range r.Owners {
		if o.UID == "" {
			return fmt.Errorf("%w: %s: owner reference without a uid", catalog.ErrInvalid, r.Key())
		}
	}
	return nil
}
