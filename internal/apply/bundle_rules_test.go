package apply_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/softdelete"
)

// TestBundlePruneOnlyReleasesAMemberWithADelayAndAnotherOwner: a pruned
// member that has another owner is only released (it loses the bundle's
// owner edge and stays Active), even when it carries a deletion delay. Its
// delay is no reason to schedule it: it is deleted when none of its owners
// remains, as a Kubernetes dependent with several owners is.
func TestBundlePruneOnlyReleasesAMemberWithADelayAndAnotherOwner(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web+delay", "db")), apply.Options{})
		require.NoError(t, err)
		team, err := st.Create(ctx, &catalog.Resource{Kind: "Team", Name: "payments"})
		require.NoError(t, err)
		web := get(t, st, "Service", "shop", "web")
		web.Owners = append(web.Owners, catalog.OwnerRef{UID: team.UID, Kind: "Team", Name: "payments"})
		_, err = st.Update(ctx, web)
		require.NoError(t, err)

		pruned := bundle("shop", "{v: 1}", "db")
		dry, err := e.Apply(ctx, docs(t, pruned), apply.Options{DryRun: true})
		require.NoError(t, err)
		assert.Equal(t, apply.Released, byName(dry)["web"].Action, "dry run")
		res, err := e.Apply(ctx, docs(t, pruned), apply.Options{})
		require.NoError(t, err)
		got := byName(res)["web"]
		require.NotNil(t, got, res.Summary())
		assert.Equal(t, apply.Released, got.Action, got.Reason)
		assert.Nil(t, got.DueAt)

		web = get(t, st, "Service", "shop", "web")
		assert.Equal(t, catalog.PhaseActive, web.Phase)
		assert.Nil(t, web.DeletionDueAt)
		assert.NotContains(t, web.Annotations, catalog.AnnotationDeletionScheduledAt)
		assert.Equal(t, []catalog.OwnerRef{{UID: team.UID, Kind: "Team", Name: "payments"}}, web.Owners, "only the bundle's edge is gone")
		_, due, err := st.NextDue(ctx)
		require.NoError(t, err)
		assert.False(t, due, "no countdown was started")

		// Long after its delay would have ended, the timers leave it alone.
		clock.Advance(24 * time.Hour)
		timers, err := softdelete.New(&softdelete.Config{Store: st, Now: clock.Now})
		require.NoError(t, err)
		_, err = timers.FireDue(ctx)
		require.NoError(t, err)
		assert.Equal(t, catalog.PhaseActive, get(t, st, "Service", "shop", "web").Phase)
	})
}

// TestReapplyingABundlePendingDeletionChangesNoneOfItsMembers: the sync
// filter for a bundle that is itself Scheduled or Deleting. Applying it
// again re-creates no member, adopts no pruned member, updates none,
// creates no new one and prunes none: the whole bundle is skipped and the
// catalog does not change.
func TestReapplyingABundlePendingDeletionChangesNoneOfItsMembers(t *testing.T) {
	for _, phase := range []catalog.Phase{catalog.PhaseScheduled, catalog.PhaseDeleting} {
		t.Run(string(phase), func(t *testing.T) {
			backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
				e := newEngine(t, st, clock)
				_, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web+delay", "api", "db")), apply.Options{})
				require.NoError(t, err)
				// web is pruned: Scheduled, counting down, still owned.
				_, err = e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "api", "db")), apply.Options{})
				require.NoError(t, err)
				require.Equal(t, catalog.PhaseScheduled, get(t, st, "Service", "shop", "web").Phase)

				shop := catalog.Key{Kind: "Bundle", Name: "shop"}
				if phase == catalog.PhaseScheduled {
					_, err = st.Schedule(ctx, shop, catalog.ScheduleOptions{Delay: time.Hour})
				} else {
					// Deleting, its cascade under way: api is already purged.
					_, err = st.Delete(ctx, shop, catalog.DeleteOptions{Finalizers: []string{catalog.FinalizerCascade}})
					require.NoError(t, err)
					api := catalog.Key{Kind: "Service", Namespace: "shop", Name: "api"}
					_, err = st.Delete(ctx, api, catalog.DeleteOptions{})
					require.NoError(t, err)
					err = st.Purge(ctx, api, catalog.PurgeOptions{Force: true})
				}
				require.NoError(t, err)
				require.Equal(t, phase, get(t, st, "Bundle", "", "shop").Phase)
				v := version(t, st)

				// web back (adoption), api back (re-creation), db changed,
				// extra new; and, in the second, db left out (a prune).
				for _, text := range []string{
					bundle("shop", "{v: 2}", "web+delay", "api", "db", "extra"),
					bundle("shop", "{v: 2}", "web+delay", "api", "extra"),
				} {
					for _, dryRun := range []bool{true, false} {
						res, err := e.Apply(ctx, docs(t, text), apply.Options{DryRun: dryRun})
						require.NoError(t, err)
						for _, c := range res.Changes {
							assert.Equal(t, apply.Skipped, c.Action, "%s (dry run %v): %s", c.Key(), dryRun, c.Reason)
						}
						assert.Equal(t, v, version(t, st), "the catalog changed (dry run %v): %s", dryRun, res.Summary())
					}
				}
				web := get(t, st, "Service", "shop", "web")
				assert.Equal(t, catalog.PhaseScheduled, web.Phase, "not adopted")
				assert.JSONEq(t, `{"v":1}`, string(web.Spec))
				assert.JSONEq(t, `{"v":1}`, string(get(t, st, "Service", "shop", "db").Spec))
				assert.Equal(t, catalog.PhaseActive, get(t, st, "Service", "shop", "db").Phase, "not pruned")
				for _, name := range []string{"extra", "api"} {
					if name == "api" && phase == catalog.PhaseScheduled {
						continue
					}
					_, err := st.Get(ctx, catalog.Key{Kind: "Service", Namespace: "shop", Name: name})
					assert.ErrorIs(t, err, catalog.ErrNotFound, "%s must not be created under a bundle pending deletion", name)
				}
			})
		})
	}
}
