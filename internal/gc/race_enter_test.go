package gc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// enterFirst is a real catalog in which another collector wins the race
// to move one resource to Deleting: its Delete of that key first runs
// the other collector's (Foreground, with the cascade finalizer), then
// the caller's, which the catalog refuses (*TransitionError). It stands
// in for two steps at once (lethe server's Parallel, or two processes),
// whose interleaving a test cannot otherwise choose.
type enterFirst struct {
	catalog.Store
	key catalog.Key
	won bool
}

func (s *enterFirst) Delete(ctx context.Context, k catalog.Key, opts catalog.DeleteOptions) (*catalog.Resource, error) {
	if k == s.key && !s.won {
		s.won = true
		if _, err := s.Store.Delete(ctx, k, catalog.DeleteOptions{Propagation: catalog.Propagation(gc.Foreground),
			Finalizers: []string{catalog.FinalizerCascade}, Reason: "another collector"}); err != nil {
			return nil, err
		}
	}
	return s.Store.Delete(ctx, k, opts)
}

// DeleteMany: the other collector moves the key first here too, just
// before the batch's write.
func (s *enterFirst) DeleteMany(ctx context.Context, items []catalog.DeleteItem) ([]*catalog.Resource, []error, error) {
	for _, it := range items {
		if it.Key == s.key && !s.won {
			s.won = true
			if _, err := s.Store.Delete(ctx, it.Key, catalog.DeleteOptions{Propagation: catalog.Propagation(gc.Foreground),
				Finalizers: []string{catalog.FinalizerCascade}, Reason: "another collector"}); err != nil {
				return nil, nil, err
			}
		}
	}
	return s.Store.DeleteMany(ctx, items)
}

// TestForegroundOwnerWaitsForADependentAnotherStepMovedToDeleting: when
// another step moved a blocking dependent to Deleting first (the owner's
// own move is refused), the owner still waits for it; it once dropped
// the dependent from what it waited for and was purged while the
// dependent and its own dependents lived (a diamond under lethe server
// purged middle layers).
func TestForegroundOwnerWaitsForADependentAnotherStepMovedToDeleting(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		for _, tc := range []struct {
			name string
			held func(owner *catalog.Resource) func(*catalog.Resource)
			// below: the held resource has no finalizer (it takes the
			// batch path first) but a dependent that holds it.
			below bool
		}{
			{"dependent", func(o *catalog.Resource) func(*catalog.Resource) { return ownedBy(o, true) }, false},
			{"batch dependent", func(o *catalog.Resource) func(*catalog.Resource) { return ownedBy(o, true) }, true},
			{"cascade referrer", func(o *catalog.Resource) func(*catalog.Resource) { return refTo(o, catalog.RefCascade) }, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				owner := f.res("Node", "owner-"+tc.name[:3])
				var held *catalog.Resource
				if tc.below {
					held = f.res("Node", "held-"+tc.name[:3], tc.held(owner))
					f.res("Node", "below-"+tc.name[:3], ownedBy(held, true), finalizer("example.com/hold"))
				} else {
					held = f.res("Node", "held-"+tc.name[:3], tc.held(owner), finalizer("example.com/hold"))
				}
				es := &enterFirst{Store: st, key: held.Key()}
				c, err := gc.New(gc.Config{Store: es, NoPlugins: true, Parallel: 1, PollInterval: 50 * time.Millisecond, Recheck: time.Hour, LeaseTTL: 5 * time.Second})
				require.NoError(t, err)
				_, err = c.Delete(f.ctx, owner.Key(), gc.DeleteOptions{Propagation: gc.Foreground})
				require.NoError(t, err)
				w, err := st.ClaimKey(f.ctx, gc.Queue, owner.UID, "test", 5*time.Second)
				require.NoError(t, err)
				require.NoError(t, c.StepClaimed(f.ctx, w))
				require.True(t, es.won, "the other collector moved %s first", held.Key())
				f.requirePhase(owner, catalog.PhaseDeleting)
			})
		}
	})
}
