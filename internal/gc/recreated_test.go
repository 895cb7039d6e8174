package gc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// TestDeleteOfAPlannedUIDLeavesANewResourceOfTheSameName: a request
// planned on one resource (its UID) finds the key holding a new one
// (the planned one purged, the name applied again): it changes nothing
// and says so, and a Drive for the old UID ends as re-created instead of
// waiting for the new, Active resource.
func TestDeleteOfAPlannedUIDLeavesANewResourceOfTheSameName(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		old := f.res("Volume", "a")
		require.Equal(t, gc.OutcomePurged, f.del(old, gc.Foreground))
		f.requirePurged(old)
		fresh := f.res("Volume", "a")
		require.NotEqual(t, old.UID, fresh.UID)

		_, err := f.c.Delete(f.ctx, old.Key(), gc.DeleteOptions{UID: old.UID})
		var re *gc.RecreatedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, fresh.UID, re.NewUID)
		f.requirePhase(fresh, catalog.PhaseActive)

		ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
		defer cancel()
		out, err := f.c.Drive(ctx, old.Key(), gc.DriveOptions{UID: old.UID})
		require.NoError(t, err, "Drive must end, not wait for the new resource")
		require.Equal(t, gc.OutcomeRecreated, out)
		f.requirePhase(fresh, catalog.PhaseActive)
	})
}

// raceGet is a real store whose first Get of one key returns what it
// read, then lets another request run (before returning it): the
// interleaving of two processes that both read a resource Active, made
// deterministic. Every call goes to the real catalog.
type raceGet struct {
	catalog.Store
	key   catalog.Key
	fired bool
	then  func()
}

func (s *raceGet) Get(ctx context.Context, k catalog.Key) (*catalog.Resource, error) {
	r, err := s.Store.Get(ctx, k)
	if err == nil && k == s.key && !s.fired {
		s.fired = true
		s.then()
	}
	return r, err
}

// TestDeleteOfAResourceAnotherRequestMovedToDeletingJoinsIt: two
// identical requests both read the resource Active; the second to write
// finds it Deleting already. It must join that deletion (success, the
// resource queued), not fail with "cannot go from Deleting to Deleting".
func TestDeleteOfAResourceAnotherRequestMovedToDeletingJoinsIt(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		r := f.res("Volume", "a")
		race := &raceGet{Store: st, key: r.Key(), then: func() {
			_, err := f.c.Delete(f.ctx, r.Key(), gc.DeleteOptions{})
			require.NoError(t, err)
		}}
		other, err := gc.New(gc.Config{Store: race, NoPlugins: true, PollInterval: 50 * time.Millisecond, Recheck: time.Hour})
		require.NoError(t, err)
		_, err = other.Delete(f.ctx, r.Key(), gc.DeleteOptions{})
		require.NoError(t, err)
		require.True(t, race.fired)
		f.requirePhase(r, catalog.PhaseDeleting)
		require.Equal(t, gc.OutcomePurged, f.drive(r))
		f.requirePurged(r)
	})
}
