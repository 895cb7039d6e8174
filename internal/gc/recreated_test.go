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
