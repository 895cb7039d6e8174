package apply_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
)

// The rules below were found by the mutation sweep of internal/apply
// (docs/mutation-sweep.md): each test kills a mutant that lived.

// TestDryRunPruneDueTimeIsTheEnginesClockPlusTheDelay: a dry run reports
// a pruned member with a deletion delay as Scheduled, due at the engine's
// clock plus its delay: the moment the apply itself sets.
func TestDryRunPruneDueTimeIsTheEnginesClockPlusTheDelay(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web+delay", "db")), apply.Options{})
		require.NoError(t, err)
		pruned := bundle("shop", "{v: 1}", "db")
		dry, err := e.Apply(ctx, docs(t, pruned), apply.Options{DryRun: true})
		require.NoError(t, err)
		got := byName(dry)["web"]
		require.NotNil(t, got, dry.Summary())
		require.Equal(t, apply.Scheduled, got.Action, got.Reason)
		require.NotNil(t, got.DueAt)
		assert.Equal(t, clock.Now().Add(time.Hour).UTC(), got.DueAt.UTC())

		res, err := e.Apply(ctx, docs(t, pruned), apply.Options{})
		require.NoError(t, err)
		require.NotNil(t, byName(res)["web"].DueAt)
		assert.Equal(t, got.DueAt.UTC(), byName(res)["web"].DueAt.UTC(), "the dry run's due time is the apply's")
	})
}

// TestCycleThroughAStoredReferenceWithItsTargetsUIDIsRefusedInADryRun: a
// stored resource's block reference that names its target's uid (a target
// that is not in the apply) is an edge of the cycle check: an apply that
// closes a cycle through it is refused before anything is written, dry run
// included.
func TestCycleThroughAStoredReferenceWithItsTargetsUIDIsRefusedInADryRun(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		// x owns z; y holds z by a block reference that names z's uid.
		// Neither y nor z is in the apply: the check reads them.
		x, err := st.Create(ctx, &catalog.Resource{Kind: "Node", Name: "x"})
		require.NoError(t, err)
		z, err := st.Create(ctx, &catalog.Resource{Kind: "Node", Name: "z", Owners: []catalog.OwnerRef{{UID: x.UID, Kind: "Node", Name: "x"}}})
		require.NoError(t, err)
		_, err = st.Create(ctx, &catalog.Resource{Kind: "Node", Name: "y", References: []catalog.Reference{
			{Kind: "Node", Name: "z", UID: z.UID, OnTargetDelete: catalog.RefBlock}}})
		require.NoError(t, err)
		v := version(t, st)
		closing := "kind: Node\nmetadata: {name: x, ownerReferences: [{kind: Node, name: y}]}"
		for _, dry := range []bool{true, false} {
			_, err = e.Apply(ctx, docs(t, closing), apply.Options{DryRun: dry})
			require.ErrorIs(t, err, catalog.ErrCycle, "dry run %v", dry)
			var re *apply.RefusedError
			require.ErrorAs(t, err, &re)
			assert.Contains(t, err.Error(), "none of them could ever be purged", "dry run %v: refused by the plan, not the write", dry)
		}
		assert.Equal(t, v, version(t, st))
	})
}

// TestDryRunRefusesACycleThroughAStaleUIDReferenceAsTheWriteDoes: a stored
// reference whose uid is no longer its target's still holds the target by
// its key, in the catalog's cycle check inside the write; the plan's check
// follows it the same way, so the dry run refuses what the apply would.
func TestDryRunRefusesACycleThroughAStaleUIDReferenceAsTheWriteDoes(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		x, err := st.Create(ctx, &catalog.Resource{Kind: "Node", Name: "x"})
		require.NoError(t, err)
		_, err = st.Create(ctx, &catalog.Resource{Kind: "Node", Name: "z", Owners: []catalog.OwnerRef{{UID: x.UID, Kind: "Node", Name: "x"}}})
		require.NoError(t, err)
		_, err = st.Create(ctx, &catalog.Resource{Kind: "Node", Name: "y", References: []catalog.Reference{
			{Kind: "Node", Name: "z", UID: "0190aaaa-0000-7000-8000-000000000000", OnTargetDelete: catalog.RefBlock}}})
		require.NoError(t, err)
		v := version(t, st)
		closing := "kind: Node\nmetadata: {name: x, ownerReferences: [{kind: Node, name: y}]}"
		for _, dry := range []bool{true, false} {
			_, err = e.Apply(ctx, docs(t, closing), apply.Options{DryRun: dry})
			require.ErrorIs(t, err, catalog.ErrCycle, "dry run %v", dry)
			assert.Contains(t, err.Error(), "Node/y holds a block reference to Node/z", "dry run %v", dry)
		}
		assert.Equal(t, v, version(t, st))
	})
}

// TestEveryOwnerIsWalkedInTheCycleCheck: the cycle check walks up through
// every owner of every resource it reaches, not only the first: x owned
// by a (no owners) and by b, which x owns, is a cycle, refused in the dry
// run as in the apply.
func TestEveryOwnerIsWalkedInTheCycleCheck(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: x}\n---\n"+
			"kind: Node\nmetadata: {name: b, ownerReferences: [{kind: Node, name: x}]}"), apply.Options{})
		require.NoError(t, err)
		v := version(t, st)
		closing := "kind: Node\nmetadata: {name: x, ownerReferences: [{kind: Node, name: a}, {kind: Node, name: b}]}"
		for _, dry := range []bool{true, false} {
			_, err = e.Apply(ctx, docs(t, closing), apply.Options{DryRun: dry})
			require.ErrorIs(t, err, catalog.ErrCycle, "dry run %v", dry)
			assert.Contains(t, err.Error(), "Node/b owns Node/x", "dry run %v", dry)
		}
		assert.Equal(t, v, version(t, st))
	})
}

// TestABundleNeverTakesAnotherBundlesMember: a resource that one bundle
// owns is refused as a member of another, also when that other bundle
// exists already, and the apply changes nothing.
func TestABundleNeverTakesAnotherBundlesMember(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, bundle("other", "{v: 1}", "taken")+"---\n"+bundle("shop", "{v: 1}", "web")), apply.Options{})
		require.NoError(t, err)
		other := get(t, st, "Bundle", "", "other")
		v := version(t, st)
		for _, dry := range []bool{true, false} {
			_, err = e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web", "taken")), apply.Options{DryRun: dry})
			require.ErrorContains(t, err, "Service/shop/taken already belongs to Bundle/other", "dry run %v", dry)
			var re *apply.RefusedError
			require.ErrorAs(t, err, &re)
		}
		assert.Equal(t, v, version(t, st))
		taken := get(t, st, "Service", "shop", "taken")
		require.Len(t, taken.Owners, 1)
		assert.Equal(t, other.UID, taken.Owners[0].UID)
	})
}

// TestANewMemberOfABundlePendingDeletionOwnsNothingWhereverItsOwnerIsListed:
// the sync filter for a bundle that is Scheduled: its new members are not
// created, so a resource owned by one is refused, whether it is listed
// after the bundle or before it, and nothing is written.
func TestANewMemberOfABundlePendingDeletionOwnsNothingWhereverItsOwnerIsListed(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "db")), apply.Options{})
		require.NoError(t, err)
		_, err = st.Schedule(ctx, catalog.Key{Kind: "Bundle", Name: "shop"}, catalog.ScheduleOptions{Delay: time.Hour})
		require.NoError(t, err)
		v := version(t, st)
		owned := "kind: Volume\nmetadata: {name: disk, namespace: shop, ownerReferences: [{kind: Service, name: web}]}\n"
		shop := bundle("shop", "{v: 1}", "db", "web")
		for name, text := range map[string]string{"after": shop + "---\n" + owned, "before": owned + "---\n" + shop} {
			for _, dry := range []bool{true, false} {
				_, err = e.Apply(ctx, docs(t, text), apply.Options{DryRun: dry})
				require.ErrorContains(t, err, "owner Service/shop/web is not being applied: its bundle is pending deletion", "%s, dry run %v", name, dry)
			}
		}
		assert.Equal(t, v, version(t, st))
	})
}

// TestAMissingOwnerOfAClusterScopedResourceIsRefusedInOneLine: an owner
// that exists neither in the catalog nor in the apply refuses the apply,
// for a cluster-scoped dependent too (one key to look in), and nothing is
// written.
func TestAMissingOwnerOfAClusterScopedResourceIsRefusedInOneLine(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		v := version(t, st)
		_, err := e.Apply(ctx, docs(t, "kind: Node\nmetadata: {name: n, ownerReferences: [{kind: Node, name: ghost}]}"), apply.Options{})
		require.ErrorContains(t, err, "metadata.ownerReferences[0]: owner Node/ghost does not exist (in the catalog or in this apply)")
		assert.NotContains(t, err.Error(), " or Node/")
		assert.Equal(t, v, version(t, st))
	})
}

// TestAnAdoptedMemberTakesItsNewLabels: a Scheduled member back in its
// bundle's spec is adopted with the bundle's desired state, also when only
// its labels changed.
func TestAnAdoptedMemberTakesItsNewLabels(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		withWeb := func(v string) string {
			return "kind: Bundle\nmetadata: {name: shop}\nspec:\n  resources:\n" +
				"  - name: db\n    object: {kind: Service, metadata: {namespace: shop}, spec: {v: 1}}\n" +
				"  - name: web\n    object: {kind: Service, metadata: {namespace: shop, labels: {tier: " + v + "}, annotations: {lethe.io/deletion-delay: 1h}}, spec: {v: 1}}\n"
		}
		_, err := e.Apply(ctx, docs(t, withWeb("old")), apply.Options{})
		require.NoError(t, err)
		_, err = e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "db")), apply.Options{})
		require.NoError(t, err)
		require.Equal(t, catalog.PhaseScheduled, get(t, st, "Service", "shop", "web").Phase)

		res, err := e.Apply(ctx, docs(t, withWeb("new")), apply.Options{})
		require.NoError(t, err)
		require.Equal(t, apply.Adopted, byName(res)["web"].Action, byName(res)["web"].Reason)
		web := get(t, st, "Service", "shop", "web")
		assert.Equal(t, catalog.PhaseActive, web.Phase)
		assert.Equal(t, map[string]string{"tier": "new"}, web.Labels)
	})
}

// TestAManifestStatusIsAppliedAndAStoredStatusKept: a changed status in
// the manifest is an update; a manifest without a status keeps the stored
// one and, applied again, changes nothing.
func TestAManifestStatusIsAppliedAndAStoredStatusKept(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		with := func(status string) string {
			return "kind: Database\nmetadata: {name: orders, namespace: prod}\nspec: {engine: postgres}\n" + status
		}
		_, err := e.Apply(ctx, docs(t, with("status: {ready: false}")), apply.Options{})
		require.NoError(t, err)
		res, err := e.Apply(ctx, docs(t, with("status: {ready: true}")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Updated, actions(res)["Database/prod/orders"])
		assert.JSONEq(t, `{"ready":true}`, string(get(t, st, "Database", "prod", "orders").Status))

		v := version(t, st)
		res, err = e.Apply(ctx, docs(t, with("")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Unchanged, actions(res)["Database/prod/orders"])
		assert.Equal(t, v, version(t, st))
		assert.JSONEq(t, `{"ready":true}`, string(get(t, st, "Database", "prod", "orders").Status))
	})
}

// TestTheSameJSONWrittenDifferentlyIsUnchanged: a spec is compared as
// JSON, not as bytes: a stored spec with other spacing and key order than
// the manifest's is unchanged, and the apply writes nothing.
func TestTheSameJSONWrittenDifferentlyIsUnchanged(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := st.Create(ctx, &catalog.Resource{Kind: "Database", Namespace: "prod", Name: "orders",
			Spec: []byte(`{ "size": 10,  "engine": "postgres" }`)})
		require.NoError(t, err)
		v := version(t, st)
		res, err := e.Apply(ctx, docs(t, "kind: Database\nmetadata: {name: orders, namespace: prod}\nspec: {engine: postgres, size: 10}"), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Unchanged, actions(res)["Database/prod/orders"])
		assert.Equal(t, v, version(t, st))
	})
}

// TestABundleMemberMayHaveOtherOwners: a bundle member may name owners of
// its own besides its bundle (only a Bundle owner is refused); it is
// created with both edges.
func TestABundleMemberMayHaveOtherOwners(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		team, err := st.Create(ctx, &catalog.Resource{Kind: "Team", Name: "payments"})
		require.NoError(t, err)
		_, err = e.Apply(ctx, docs(t, "kind: Bundle\nmetadata: {name: shop}\nspec:\n  resources:\n"+
			"  - {name: web, object: {kind: Service, metadata: {namespace: shop, ownerReferences: [{kind: Team, name: payments}]}}}\n"), apply.Options{})
		require.NoError(t, err)
		web := get(t, st, "Service", "shop", "web")
		require.Len(t, web.Owners, 2)
		assert.Equal(t, team.UID, web.Owners[1].UID)
	})
}
