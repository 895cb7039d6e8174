package apply_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/softdelete"
)

// bundle returns a Bundle manifest with the named members; a member named
// with a "+delay" suffix carries lethe.io/deletion-delay: 1h. spec is
// each member's spec.
func bundle(name, spec string, members ...string) string {
	var b strings.Builder
	b.WriteString("kind: Bundle\nmetadata: {name: " + name + "}\nspec:\n  resources:")
	if len(members) == 0 {
		b.WriteString(" []")
	}
	b.WriteString("\n")
	for _, m := range members {
		ann := ""
		if n, ok := strings.CutSuffix(m, "+delay"); ok {
			m, ann = n, ", annotations: {lethe.io/deletion-delay: 1h}"
		}
		b.WriteString("  - name: " + m + "\n    object: {kind: Service, metadata: {namespace: shop" + ann + "}, spec: " + spec + "}\n")
	}
	return b.String()
}

func byName(res *apply.Result) map[string]*apply.Change {
	out := map[string]*apply.Change{}
	for _, c := range res.Changes {
		out[c.Name] = c
	}
	return out
}

func TestBundleLifecycle(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		svc := func(name string) catalog.Key { return catalog.Key{Kind: "Service", Namespace: "shop", Name: name} }

		// Create: every member owned by the bundle.
		res, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web+delay", "api", "db+delay")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, 4, res.Count(apply.Created), res.Summary())
		b := get(t, st, "Bundle", "", "shop")
		web := get(t, st, "Service", "shop", "web")
		require.Len(t, web.Owners, 1)
		assert.Equal(t, catalog.OwnerRef{UID: b.UID, Kind: "Bundle", Name: "shop", BlockOwnerDeletion: true}, web.Owners[0])
		assert.Equal(t, "web", byName(res)["web"].Member)
		assert.Equal(t, "Bundle/shop", byName(res)["web"].Bundle)

		// Idempotent.
		v := version(t, st)
		res, err = e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web+delay", "api", "db+delay")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, 4, res.Count(apply.Unchanged), res.Summary())
		assert.Equal(t, v, version(t, st))

		// Prune web (delay: Scheduled, counting down) and api (no delay:
		// Deleting, through the collector's finalizers). A dry run first
		// reports the same and changes nothing.
		pruned := bundle("shop", "{v: 1}", "db+delay")
		dry, err := e.Apply(ctx, docs(t, pruned), apply.Options{DryRun: true})
		require.NoError(t, err)
		assert.Equal(t, v, version(t, st))
		res, err = e.Apply(ctx, docs(t, pruned), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, actions(dry), actions(res))
		got := byName(res)
		assert.Equal(t, apply.Scheduled, got["web"].Action)
		require.NotNil(t, got["web"].DueAt)
		assert.True(t, got["web"].DueAt.Equal(catalogtest.Epoch.Add(time.Hour)), "due at %v", got["web"].DueAt)
		assert.True(t, dry.Changes[len(dry.Changes)-1].DueAt != nil)
		assert.Equal(t, apply.Deleted, got["api"].Action)
		assert.Equal(t, apply.Unchanged, got["db"].Action)
		web = get(t, st, "Service", "shop", "web")
		assert.Equal(t, catalog.PhaseScheduled, web.Phase)
		assert.Equal(t, catalogtest.Epoch.Format(time.RFC3339), web.Annotations[catalog.AnnotationDeletionScheduledAt])
		next, ok, err := st.NextDue(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		assert.True(t, next.Equal(catalogtest.Epoch.Add(time.Hour)))
		api := get(t, st, "Service", "shop", "api")
		assert.Equal(t, catalog.PhaseDeleting, api.Phase)
		assert.ElementsMatch(t, []string{catalog.FinalizerCascade, catalog.FinalizerDeleteActions}, api.Finalizers)
		assert.Equal(t, catalog.PropagationForeground, api.PropagationPolicy)

		// Applying the pruned bundle again changes nothing more.
		v = version(t, st)
		res, err = e.Apply(ctx, docs(t, pruned), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, v, version(t, st), res.Summary())

		// Adoption before the delay expires: web is back in the spec, with
		// a new spec. It is Active, without the annotation, no longer due,
		// with the desired spec. api, Deleting, is not re-created.
		clock.Advance(30 * time.Minute)
		back := bundle("shop", "{v: 2}", "web+delay", "api", "db+delay")
		dry, err = e.Apply(ctx, docs(t, back), apply.Options{DryRun: true})
		require.NoError(t, err)
		assert.Equal(t, apply.Adopted, byName(dry)["web"].Action)
		assert.Equal(t, catalog.PhaseScheduled, get(t, st, "Service", "shop", "web").Phase, "dry run")
		res, err = e.Apply(ctx, docs(t, back), apply.Options{})
		require.NoError(t, err)
		got = byName(res)
		assert.Equal(t, apply.Adopted, got["web"].Action)
		assert.Equal(t, apply.Skipped, got["api"].Action)
		assert.Contains(t, got["api"].Reason, "Deleting")
		assert.Equal(t, apply.Updated, got["db"].Action)
		web = get(t, st, "Service", "shop", "web")
		assert.Equal(t, catalog.PhaseActive, web.Phase)
		assert.NotContains(t, web.Annotations, catalog.AnnotationDeletionScheduledAt)
		assert.Nil(t, web.DeletionDueAt)
		assert.JSONEq(t, `{"v":2}`, string(web.Spec))
		_, ok, err = st.NextDue(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "the countdown is cancelled")
		assert.Equal(t, catalog.PhaseDeleting, get(t, st, "Service", "shop", "api").Phase)

		// The timers, once the delay has passed, leave the adopted member
		// alone.
		clock.Advance(2 * time.Hour)
		timers, err := softdelete.New(&softdelete.Config{Store: st, Now: clock.Now})
		require.NoError(t, err)
		_, err = timers.FireDue(ctx)
		require.NoError(t, err)
		assert.Equal(t, 0, timers.Fired)
		assert.Equal(t, catalog.PhaseActive, get(t, st, "Service", "shop", "web").Phase)

		// Once purged, a member that reappears is created again, with a
		// new uid.
		oldUID := api.UID
		require.NoError(t, st.Purge(ctx, svc("api"), catalog.PurgeOptions{Force: true}))
		res, err = e.Apply(ctx, docs(t, back), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Created, byName(res)["api"].Action)
		api = get(t, st, "Service", "shop", "api")
		assert.NotEqual(t, oldUID, api.UID)
		assert.Equal(t, b.UID, api.Owners[0].UID)
	})
}

// A pruned member with a delay that is not adopted is deleted when its
// window ends (the timers), and the bundle does not re-create it while it
// is Deleting.
func TestBundlePrunedMemberExpires(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web+delay", "api")), apply.Options{})
		require.NoError(t, err)
		_, err = e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "api")), apply.Options{})
		require.NoError(t, err)
		clock.Advance(time.Hour)
		timers, err := softdelete.New(&softdelete.Config{Store: st, Now: clock.Now})
		require.NoError(t, err)
		_, err = timers.FireDue(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, timers.Fired)
		assert.Equal(t, catalog.PhaseDeleting, get(t, st, "Service", "shop", "web").Phase)
		res, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web+delay", "api")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Skipped, byName(res)["web"].Action)
		assert.Equal(t, catalog.PhaseDeleting, get(t, st, "Service", "shop", "web").Phase)
	})
}

// Bad bundles are refused with one line, and nothing is applied.
func TestBundleRefusals(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, bundle("other", "{v: 1}", "taken")+"---\nkind: Service\nmetadata: {name: loose, namespace: shop}"), apply.Options{})
		require.NoError(t, err)
		for _, tc := range []struct{ name, text, want string }{
			{"owned by another bundle", bundle("shop", "{v: 1}", "web", "taken"),
				`app.yaml, document 1 (Bundle/shop): spec.resources[1].object: Service/shop/taken already belongs to Bundle/other`},
			{"member changed outside its bundle", "kind: Service\nmetadata: {name: taken, namespace: shop}",
				`metadata.ownerReferences: Service/shop/taken is a member of Bundle/other, which owns its metadata.ownerReferences: change it through its bundle`},
			{"member with a bundle owner", "kind: Bundle\nmetadata: {name: shop}\nspec:\n  resources:\n  - {name: web, object: {kind: Service, metadata: {ownerReferences: [{kind: Bundle, name: other}]}}}",
				`metadata.ownerReferences[0]: a bundle member's bundle is its owner already`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				v := version(t, st)
				_, err := e.Apply(ctx, docs(t, tc.text), apply.Options{})
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
				assert.NotContains(t, err.Error(), "\n")
				assert.Equal(t, v, version(t, st))
			})
		}
		// A standalone resource joins a bundle that lists it (updated,
		// now owned), and a member with another, non-bundle owner is only
		// released when pruned.
		res, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "loose")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Updated, byName(res)["loose"].Action)
		loose := get(t, st, "Service", "shop", "loose")
		loose.Owners = append(loose.Owners, catalog.OwnerRef{UID: get(t, st, "Bundle", "", "other").UID, Kind: "Team", Name: "x"})
		_, err = st.Update(ctx, loose)
		require.NoError(t, err)
		res, err = e.Apply(ctx, docs(t, bundle("shop", "{v: 1}")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Released, byName(res)["loose"].Action)
		loose = get(t, st, "Service", "shop", "loose")
		assert.Equal(t, catalog.PhaseActive, loose.Phase)
		require.Len(t, loose.Owners, 1)
		assert.Equal(t, "Team", loose.Owners[0].Kind)
	})
}

// recordingPruner is the Pruner seam: the collector plugs in here.
type recordingPruner struct {
	apply.LifecyclePruner
	keys []catalog.Key
}

func (p *recordingPruner) Delete(ctx2 context.Context, k catalog.Key) error {
	p.keys = append(p.keys, k)
	return p.LifecyclePruner.Delete(ctx2, k)
}

func TestBundlePrunesThroughThePruner(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		pr := &recordingPruner{LifecyclePruner: apply.LifecyclePruner{Store: st}}
		e, err := apply.New(&apply.Config{Store: st, Now: clock.Now, Pruner: pr})
		require.NoError(t, err)
		_, err = e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "a", "b+delay")), apply.Options{})
		require.NoError(t, err)
		_, err = e.Apply(ctx, docs(t, bundle("shop", "{v: 1}")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, []catalog.Key{{Kind: "Service", Namespace: "shop", Name: "a"}}, pr.keys, "only the member without a delay goes at once")
	})
}

// failingPruner fails like a process dying between the batch and the
// prune would leave things: the batch is committed, the prune not done.
type failingPruner struct{ err error }

func (p failingPruner) Delete(context.Context, catalog.Key) error { return p.err }

// A prune that fails after the batch is finished by applying again.
func TestBundleReapplyFinishesAnInterruptedPrune(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		broken, err := apply.New(&apply.Config{Store: st, Now: clock.Now, Pruner: failingPruner{errors.New("collector down")}})
		require.NoError(t, err)
		_, err = broken.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "a", "b")), apply.Options{})
		require.NoError(t, err)
		_, err = broken.Apply(ctx, docs(t, bundle("shop", "{v: 2}", "b")), apply.Options{})
		require.ErrorContains(t, err, "pruning Service/shop/a: collector down (apply again to finish)")
		assert.JSONEq(t, `{"v":2}`, string(get(t, st, "Service", "shop", "b").Spec), "the batch before the prune is committed")
		assert.Equal(t, catalog.PhaseActive, get(t, st, "Service", "shop", "a").Phase)

		res, err := newEngine(t, st, clock).Apply(ctx, docs(t, bundle("shop", "{v: 2}", "b")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Deleted, byName(res)["a"].Action)
		assert.Equal(t, apply.Unchanged, byName(res)["b"].Action)
		assert.Equal(t, catalog.PhaseDeleting, get(t, st, "Service", "shop", "a").Phase)
	})
}

// The sync filter: a Scheduled resource that no bundle owns is not
// adopted by a bundle that starts listing it; it stays Scheduled.
func TestBundleDoesNotAdoptAStranger(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, "kind: Service\nmetadata: {name: web, namespace: shop}\nspec: {v: 0}"), apply.Options{})
		require.NoError(t, err)
		_, err = st.Schedule(ctx, catalog.Key{Kind: "Service", Namespace: "shop", Name: "web"}, catalog.ScheduleOptions{Delay: time.Hour})
		require.NoError(t, err)
		res, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web")), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Skipped, byName(res)["web"].Action)
		web := get(t, st, "Service", "shop", "web")
		assert.Equal(t, catalog.PhaseScheduled, web.Phase)
		assert.JSONEq(t, `{"v":0}`, string(web.Spec))
		assert.Empty(t, web.Owners)
	})
}
