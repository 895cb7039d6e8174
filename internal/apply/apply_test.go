package apply_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/manifest"
)

var ctx = catalog.WithActor(context.Background(), "tester")

func docs(t *testing.T, text string) []*manifest.Document {
	t.Helper()
	ds, err := manifest.Parse(manifest.Source{Name: "app.yaml", Data: []byte(text)}, manifest.DefaultLimits)
	require.NoError(t, err)
	return ds
}

func newEngine(t *testing.T, st apply.Catalog, clock *catalogtest.Clock) *apply.Engine {
	t.Helper()
	e, err := apply.New(&apply.Config{Store: st, Now: clock.Now})
	require.NoError(t, err)
	return e
}

func actions(res *apply.Result) map[string]apply.Action {
	out := map[string]apply.Action{}
	for _, c := range res.Changes {
		out[c.Key().String()] = c.Action
	}
	return out
}

func version(t *testing.T, st catalog.Store) int64 {
	t.Helper()
	v, err := st.CurrentVersion(ctx)
	require.NoError(t, err)
	return v
}

func get(t *testing.T, st catalog.Store, kind, ns, name string) *catalog.Resource {
	t.Helper()
	r, err := st.Get(ctx, catalog.Key{Kind: kind, Namespace: ns, Name: name})
	require.NoError(t, err)
	return r
}

const app = `kind: VolumeSnapshot
metadata:
  name: snap-a
  namespace: prod
  labels: {team: db}
  annotations: {lethe.io/deletion-delay: 24h}
  ownerReferences:
  - {kind: Backup, name: nightly-0412, blockOwnerDeletion: true}
  finalizers: [example.com/drain]
references:
- {kind: Database, namespace: prod, name: orders, onTargetDelete: block}
spec: {snapshotHandle: snap-0a1b}
---
kind: Database
metadata: {name: orders, namespace: prod}
spec: {engine: postgres}
---
kind: Volume
metadata:
  name: vol-1
  namespace: prod
  ownerReferences: [{kind: Database, name: orders}]
references:
- {kind: Zone, name: eu-1, onTargetDelete: allowDangling}
`

// addBackup stores a Backup row the way `backup create` would (apply
// does not write Backups).
func addBackup(t *testing.T, st catalog.Store, name string) *catalog.Resource {
	t.Helper()
	r, err := st.Create(ctx, &catalog.Resource{Kind: "Backup", Name: name})
	require.NoError(t, err)
	return r
}

func TestApplyCreateUpdateIdempotent(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		b := addBackup(t, st, "nightly-0412")

		res, err := e.Apply(ctx, docs(t, app), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, map[string]apply.Action{
			"VolumeSnapshot/prod/snap-a": apply.Created, "Database/prod/orders": apply.Created, "Volume/prod/vol-1": apply.Created,
		}, actions(res))
		snap := get(t, st, "VolumeSnapshot", "prod", "snap-a")
		// The owner named by kind and name in namespace prod is found
		// cluster-scoped, and resolved to its uid.
		assert.Equal(t, []catalog.OwnerRef{{UID: b.UID, Kind: "Backup", Name: "nightly-0412", BlockOwnerDeletion: true}}, snap.Owners)
		assert.Equal(t, []string{"example.com/drain"}, snap.Finalizers)
		assert.JSONEq(t, `{"snapshotHandle":"snap-0a1b"}`, string(snap.Spec))
		orders := get(t, st, "Database", "prod", "orders")
		vol := get(t, st, "Volume", "prod", "vol-1")
		// An owner created later in the same file is written first.
		assert.Equal(t, orders.UID, vol.Owners[0].UID)
		assert.Less(t, orders.ResourceVersion, vol.ResourceVersion)
		referrers, err := st.Referrers(ctx, orders.Key())
		require.NoError(t, err)
		require.Len(t, referrers, 1)
		assert.Equal(t, "snap-a", referrers[0].Name)

		// Idempotent: the same file again writes nothing.
		v := version(t, st)
		res, err = e.Apply(ctx, docs(t, app), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, 3, res.Count(apply.Unchanged), res.Summary())
		assert.Equal(t, v, version(t, st))

		// A changed label is an update; the rest stays unchanged. The
		// status a controller wrote is kept (the manifest has none).
		orders.Status = []byte(`{"ready":true}`)
		_, err = st.Update(ctx, orders)
		require.NoError(t, err)
		changed := docs(t, app)
		changed[1].Metadata.Labels = map[string]string{"tier": "gold"}
		res, err = e.Apply(ctx, changed, apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Updated, actions(res)["Database/prod/orders"])
		assert.Equal(t, 2, res.Count(apply.Unchanged))
		orders = get(t, st, "Database", "prod", "orders")
		assert.Equal(t, "gold", orders.Labels["tier"])
		assert.JSONEq(t, `{"ready":true}`, string(orders.Status))
		assert.Equal(t, orders.UID, get(t, st, "Volume", "prod", "vol-1").Owners[0].UID, "the uid is kept")
	})
}

// Every refusal names the document and the field, and applies nothing:
// not even the valid documents before the bad one.
func TestApplyRefusals(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, `kind: Database
metadata: {name: existing, namespace: prod}
---
kind: Database
metadata: {name: gone, namespace: prod}
---
kind: Node
metadata: {name: x}
---
kind: Node
metadata: {name: y, ownerReferences: [{kind: Node, name: x}]}
`), apply.Options{})
		require.NoError(t, err)
		gone := get(t, st, "Database", "prod", "gone")
		_, err = st.Delete(ctx, gone.Key(), catalog.DeleteOptions{Finalizers: []string{"example.com/hold"}})
		require.NoError(t, err)
		good := "kind: Database\nmetadata: {name: fresh, namespace: prod}\n---\n"
		for _, tc := range []struct{ name, doc, want string }{
			{"missing owner", "kind: Volume\nmetadata: {name: v, namespace: prod, ownerReferences: [{kind: Database, name: nope}]}",
				`app.yaml, document 2 (Volume/prod/v): metadata.ownerReferences[0]: owner Database/prod/nope or Database/nope does not exist`},
			{"missing block target", "kind: Volume\nmetadata: {name: v, namespace: prod}\nreferences: [{kind: Database, namespace: prod, name: nope, onTargetDelete: block}]",
				`app.yaml, document 2 (Volume/prod/v): references[0]: block target Database/prod/nope does not exist`},
			{"missing unset target", "kind: Volume\nmetadata: {name: v}\nreferences: [{kind: Database, name: existing, onTargetDelete: unset}]",
				`references[0]: unset target Database/existing does not exist`},
			{"missing cascade target", "kind: Volume\nmetadata: {name: v}\nreferences: [{kind: Database, name: nope, onTargetDelete: cascade}]",
				`references[0]: cascade target Database/nope does not exist`},
			{"owner being deleted", "kind: Volume\nmetadata: {name: v, namespace: prod, ownerReferences: [{kind: Database, name: gone}]}",
				`metadata.ownerReferences[0]: owner Database/prod/gone is being deleted`},
			{"wrong owner uid", "kind: Volume\nmetadata: {name: v, namespace: prod, ownerReferences: [{kind: Database, name: existing, uid: x-0000}]}",
				`metadata.ownerReferences[0]: owner Database/prod/existing has uid`},
			{"cycle in the file", "kind: A\nmetadata: {name: a, ownerReferences: [{kind: B, name: b}]}\n---\nkind: B\nmetadata: {name: b, ownerReferences: [{kind: A, name: a}]}",
				`app.yaml, document 2 (A/a): metadata.ownerReferences: cycle: A/a owns B/b; B/b owns A/a: none of them could ever be purged`},
			{"cycle through the catalog", "kind: Node\nmetadata: {name: x, ownerReferences: [{kind: Node, name: y}]}",
				`app.yaml, document 2 (Node/x): metadata.ownerReferences: cycle: Node/x owns Node/y; Node/y owns Node/x`},
			{"cycle of an owner edge and a block reference", "kind: Node\nmetadata: {name: x}\nreferences: [{kind: Node, name: y, onTargetDelete: block}]",
				`app.yaml, document 2 (Node/x): references: cycle: Node/x owns Node/y; Node/x holds a block reference to Node/y`},
			{"cycle of block references", "kind: R\nmetadata: {name: r1}\nreferences: [{kind: R, name: r2, onTargetDelete: block}]\n---\nkind: R\nmetadata: {name: r2}\nreferences: [{kind: R, name: r1, onTargetDelete: block}]",
				`cycle: R/r2 holds a block reference to R/r1; R/r1 holds a block reference to R/r2`},
			{"cycle of cascade references", "kind: R\nmetadata: {name: r1}\nreferences: [{kind: R, name: r2, onTargetDelete: cascade}]\n---\nkind: R\nmetadata: {name: r2}\nreferences: [{kind: R, name: r1, onTargetDelete: cascade}]",
				`cycle: R/r2 holds a cascade reference to R/r1; R/r1 holds a cascade reference to R/r2`},
			{"twice", "kind: Database\nmetadata: {name: fresh, namespace: prod}", `app.yaml, document 2 (Database/prod/fresh): Database/prod/fresh is also in app.yaml, document 1`},
			{"backup", "kind: Backup\nmetadata: {name: b}", `kind: apply does not write Backups`},
			{"a storage location's record", "kind: BackupStorageLocation\nmetadata: {name: archive}\nspec: {url: \"file:///tmp/x\"}", `kind: apply does not write BackupStorageLocations`},
			{"a leader lease", "kind: LeaderLease\nmetadata: {name: lethe-server}", `kind: apply does not write LeaderLeases`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				v := version(t, st)
				_, err := e.Apply(ctx, docs(t, good+tc.doc), apply.Options{})
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
				var re *apply.RefusedError
				assert.ErrorAs(t, err, &re)
				assert.Equal(t, v, version(t, st), "nothing written")
				_, err = st.Get(ctx, catalog.Key{Kind: "Database", Namespace: "prod", Name: "fresh"})
				assert.ErrorIs(t, err, catalog.ErrNotFound, "the good document before the bad one is not applied")
			})
		}
	})
}

// raceStore lets another writer change a resource between apply's plan
// and its write.
type raceStore struct {
	catalog.Store
	before func()
}

func (s *raceStore) WriteBatch(ctx context.Context, ws []catalog.Write) ([]*catalog.Resource, error) {
	if s.before != nil {
		s.before()
	}
	return s.Store.WriteBatch(ctx, ws)
}

// WriteEach is the engine's write: the barrier holds it too.
func (s *raceStore) WriteEach(ctx context.Context, n int, at func(int) (catalog.Write, error), done func(int, *catalog.Resource)) error {
	if s.before != nil {
		s.before()
	}
	return s.Store.WriteEach(ctx, n, at, done)
}

func TestApplyConflicts(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, "kind: Database\nmetadata: {name: orders}\nspec: {size: 1}"), apply.Options{})
		require.NoError(t, err)
		orders := get(t, st, "Database", "", "orders")

		// A stale metadata.resourceVersion in the manifest.
		v := version(t, st)
		stale := docs(t, "kind: Database\nmetadata: {name: orders, resourceVersion: 1}\nspec: {size: 2}")
		stale[0].Metadata.ResourceVersion = orders.ResourceVersion + 5
		_, err = e.Apply(ctx, stale, apply.Options{})
		var ce *apply.ConflictError
		require.ErrorAs(t, err, &ce)
		assert.Contains(t, err.Error(), "Database/orders: the manifest has resourceVersion")
		assert.Contains(t, err.Error(), "nothing was applied")
		assert.Equal(t, v, version(t, st))
		// The current one applies.
		stale[0].Metadata.ResourceVersion = orders.ResourceVersion
		_, err = e.Apply(ctx, stale, apply.Options{})
		require.NoError(t, err)

		// The read-modify-write race: someone updates orders after apply
		// read it. The whole batch fails, the create before it included.
		rs := &raceStore{Store: st}
		re := newEngine(t, rs, clock)
		rs.before = func() {
			cur := get(t, st, "Database", "", "orders")
			cur.Labels = map[string]string{"by": "someone-else"}
			_, err := st.Update(ctx, cur)
			require.NoError(t, err)
		}
		v = version(t, st)
		_, err = re.Apply(ctx, docs(t, "kind: Database\nmetadata: {name: first}\n---\nkind: Database\nmetadata: {name: orders}\nspec: {size: 3}"), apply.Options{})
		require.ErrorAs(t, err, &ce)
		assert.True(t, ce.Race)
		assert.Contains(t, err.Error(), "Database/orders changed while apply ran")
		assert.Equal(t, catalog.Key{Kind: "Database", Name: "orders"}, ce.Key)
		assert.ErrorIs(t, err, catalog.ErrConflict)
		assert.Equal(t, v+1, version(t, st), "only the other writer's update")
		_, err = st.Get(ctx, catalog.Key{Kind: "Database", Name: "first"})
		assert.ErrorIs(t, err, catalog.ErrNotFound, "all or nothing")
		assert.Equal(t, "someone-else", get(t, st, "Database", "", "orders").Labels["by"])

		// A create racing another create of the same key.
		rs.before = func() {
			_, err := st.Create(ctx, &catalog.Resource{Kind: "Database", Name: "new"})
			require.NoError(t, err)
		}
		_, err = re.Apply(ctx, docs(t, "kind: Database\nmetadata: {name: other}\n---\nkind: Database\nmetadata: {name: new}"), apply.Options{})
		require.ErrorAs(t, err, &ce)
		assert.ErrorIs(t, err, catalog.ErrAlreadyExists)
		_, err = st.Get(ctx, catalog.Key{Kind: "Database", Name: "other"})
		assert.ErrorIs(t, err, catalog.ErrNotFound)

		// An owner purged between the plan and the write.
		_, err = e.Apply(ctx, docs(t, "kind: Database\nmetadata: {name: doomed}"), apply.Options{})
		require.NoError(t, err)
		rs.before = func() {
			k := catalog.Key{Kind: "Database", Name: "doomed"}
			_, err := st.Delete(ctx, k, catalog.DeleteOptions{})
			require.NoError(t, err)
			require.NoError(t, st.Purge(ctx, k, catalog.PurgeOptions{}))
		}
		_, err = re.Apply(ctx, docs(t, "kind: Volume\nmetadata: {name: v, ownerReferences: [{kind: Database, name: doomed}]}"), apply.Options{})
		require.ErrorAs(t, err, &ce)
		assert.ErrorIs(t, err, catalog.ErrNotFound)
		_, err = st.Get(ctx, catalog.Key{Kind: "Volume", Name: "v"})
		assert.ErrorIs(t, err, catalog.ErrNotFound)
	})
}

func TestApplySyncFilter(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		text := "kind: Database\nmetadata: {name: sched}\nspec: {v: 1}\n---\nkind: Database\nmetadata: {name: del}\nspec: {v: 1}\n---\nkind: Database\nmetadata: {name: live}\nspec: {v: 1}"
		_, err := e.Apply(ctx, docs(t, text), apply.Options{})
		require.NoError(t, err)
		_, err = st.Schedule(ctx, catalog.Key{Kind: "Database", Name: "sched"}, catalog.ScheduleOptions{Delay: time.Hour})
		require.NoError(t, err)
		_, err = st.Delete(ctx, catalog.Key{Kind: "Database", Name: "del"}, catalog.DeleteOptions{Finalizers: []string{"example.com/hold"}})
		require.NoError(t, err)
		before := map[string]*catalog.Resource{"sched": get(t, st, "Database", "", "sched"), "del": get(t, st, "Database", "", "del")}

		changed := "kind: Database\nmetadata: {name: sched}\nspec: {v: 2}\n---\nkind: Database\nmetadata: {name: del}\nspec: {v: 2}\n---\nkind: Database\nmetadata: {name: live}\nspec: {v: 2}"
		res, err := e.Apply(ctx, docs(t, changed), apply.Options{})
		require.NoError(t, err)
		got := actions(res)
		assert.Equal(t, apply.Skipped, got["Database/sched"])
		assert.Equal(t, apply.Skipped, got["Database/del"])
		assert.Equal(t, apply.Updated, got["Database/live"])
		for _, c := range res.Changes {
			switch c.Name {
			case "sched":
				assert.Contains(t, c.Reason, "Scheduled for deletion at 2030-01-02T04:04:05Z")
			case "del":
				assert.Contains(t, c.Reason, "Deleting: apply does not change or re-create it")
			}
		}
		for name, b := range before {
			assert.Equal(t, b, get(t, st, "Database", "", name), name)
		}
		// Nor is a Deleting resource re-created once a resource depends
		// on it: a dependent may not name it as owner.
		_, err = e.Apply(ctx, docs(t, "kind: Volume\nmetadata: {name: v, ownerReferences: [{kind: Database, name: del}]}"), apply.Options{})
		require.ErrorContains(t, err, "owner Database/del is being deleted")
	})
}

func TestApplyDryRunChangesNothing(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		addBackup(t, st, "nightly-0412")
		v := version(t, st)
		dry, err := e.Apply(ctx, docs(t, app), apply.Options{DryRun: true})
		require.NoError(t, err)
		assert.True(t, dry.DryRun)
		assert.Equal(t, 3, dry.Count(apply.Created))
		assert.Equal(t, v, version(t, st))
		_, err = st.Get(ctx, catalog.Key{Kind: "Database", Namespace: "prod", Name: "orders"})
		require.ErrorIs(t, err, catalog.ErrNotFound)
		// The real run does what the dry run said.
		real, err := e.Apply(ctx, docs(t, app), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, actions(dry), actions(real))
		// And a dry run of a change reports the update, writing nothing.
		changed := docs(t, app)
		changed[1].Spec = []byte(`{"engine":"mysql"}`)
		v = version(t, st)
		dry, err = e.Apply(ctx, changed, apply.Options{DryRun: true})
		require.NoError(t, err)
		assert.Equal(t, apply.Updated, actions(dry)["Database/prod/orders"])
		assert.Equal(t, 2, dry.Count(apply.Unchanged))
		assert.Equal(t, v, version(t, st))
	})
}

func TestApplyErrorsAreNotRefusals(t *testing.T) {
	_, err := apply.New(&apply.Config{})
	require.Error(t, err)
	var re *apply.RefusedError
	assert.False(t, errors.As(err, &re))
}

// TestConcurrentAppliesNeverStoreACycle: two applies that each add one
// half of a cycle both pass their plan (a barrier holds each at its
// write until both have planned); the catalog's check inside the write
// transaction refuses the second, with one line naming the cycle, and
// nothing of it is written. Then many applies race freely.
func TestConcurrentAppliesNeverStoreACycle(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		halves := [][2]string{
			{"kind: Node\nmetadata: {name: y%[1]d, ownerReferences: [{kind: Node, name: x%[1]d, blockOwnerDeletion: true}]}",
				"kind: Node\nmetadata: {name: x%[1]d}\nreferences: [{kind: Node, name: y%[1]d, onTargetDelete: block}]"},
			{"kind: Node\nmetadata: {name: y%[1]d, ownerReferences: [{kind: Node, name: x%[1]d}]}",
				"kind: Node\nmetadata: {name: x%[1]d, ownerReferences: [{kind: Node, name: y%[1]d}]}"},
			{"kind: Node\nmetadata: {name: y%[1]d}\nreferences: [{kind: Node, name: x%[1]d, onTargetDelete: block}]",
				"kind: Node\nmetadata: {name: x%[1]d}\nreferences: [{kind: Node, name: y%[1]d, onTargetDelete: cascade}]"},
		}
		setupPair := func(i int) {
			_, err := e.Apply(ctx, docs(t, fmt.Sprintf("kind: Node\nmetadata: {name: x%[1]d}\n---\nkind: Node\nmetadata: {name: y%[1]d}", i)), apply.Options{})
			require.NoError(t, err)
		}
		edges := func(i int) int {
			x, y := get(t, st, "Node", "", fmt.Sprintf("x%d", i)), get(t, st, "Node", "", fmt.Sprintf("y%d", i))
			return len(x.Owners) + len(x.References) + len(y.Owners) + len(y.References)
		}
		for i, h := range halves {
			setupPair(i)
			var planned sync.WaitGroup
			planned.Add(2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for j := range 2 {
				rs := &raceStore{Store: st, before: func() { planned.Done(); planned.Wait() }}
				re := newEngine(t, rs, clock)
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[j] = re.Apply(ctx, docs(t, fmt.Sprintf(h[j], i)), apply.Options{})
				}()
			}
			wg.Wait()
			require.False(t, errs[0] == nil && errs[1] == nil, "case %d: both halves of a cycle were applied", i)
			failed := errs[0]
			if failed == nil {
				failed = errs[1]
			}
			require.Error(t, failed)
			require.True(t, errs[0] == nil || errs[1] == nil, "case %d: both refused: %v; %v", i, errs[0], errs[1])
			var re *apply.RefusedError
			require.ErrorAs(t, failed, &re)
			require.ErrorIs(t, failed, catalog.ErrCycle)
			assert.Regexp(t, `^cycle: Node/x\d owns|^cycle: Node/[xy]\d holds`, failed.Error())
			assert.Contains(t, failed.Error(), "nothing was applied")
			assert.NotContains(t, failed.Error(), "\n")
			assert.Equal(t, 1, edges(i), "case %d: exactly one half stored", i)
		}

		// Many applies racing freely: no cycle is ever stored.
		const pairs = 12
		var wg sync.WaitGroup
		for i := 10; i < 10+pairs; i++ {
			setupPair(i)
		}
		for i := 10; i < 10+pairs; i++ {
			for j := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := e.Apply(ctx, docs(t, fmt.Sprintf(halves[i%3][j], i)), apply.Options{})
					if err != nil && !errors.Is(err, catalog.ErrCycle) {
						t.Errorf("pair %d: %v", i, err)
					}
				}()
			}
		}
		wg.Wait()
		for i := 10; i < 10+pairs; i++ {
			assert.Equal(t, 1, edges(i), "pair %d: exactly one half stored", i)
		}
	})
}

// TestApplyManyDocumentsReadsInChunks: an apply of more documents than
// the plan reads at once (three chunks) finds every stored one: applied
// again it changes nothing; a changed spec and a changed label in the
// later chunks are the only updates, in the dry run and in the apply.
func TestApplyManyDocumentsReadsInChunks(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		const n = 1100
		text := func(specOf, labelOf int) string {
			var b strings.Builder
			for i := range n {
				spec, label := "a", "x"
				if i == specOf {
					spec = "b"
				}
				if i == labelOf {
					label = "y"
				}
				fmt.Fprintf(&b, "---\nkind: ConfigMap\nmetadata: {name: cm-%04d, namespace: prod, labels: {l: %s}}\nspec: {v: %s}\n", i, label, spec)
			}
			return b.String()
		}
		res, err := e.Apply(ctx, docs(t, text(-1, -1)), apply.Options{})
		require.NoError(t, err)
		require.Equal(t, n, res.Count(apply.Created))
		res, err = e.Apply(ctx, docs(t, text(-1, -1)), apply.Options{})
		require.NoError(t, err)
		require.Equal(t, n, res.Count(apply.Unchanged), res.Summary())
		for _, dry := range []bool{true, false} {
			v0 := version(t, st)
			res, err = e.Apply(ctx, docs(t, text(1050, 600)), apply.Options{DryRun: dry, TakeDocuments: true})
			require.NoError(t, err)
			assert.Equal(t, "2 updated, 1098 unchanged", res.Summary(), "dry run %v", dry)
			got := actions(res)
			assert.Equal(t, apply.Updated, got["ConfigMap/prod/cm-1050"])
			assert.Equal(t, apply.Updated, got["ConfigMap/prod/cm-0600"])
			if dry {
				assert.Equal(t, v0, version(t, st), "a dry run writes nothing")
			}
		}
		assert.JSONEq(t, `{"v":"b"}`, string(get(t, st, "ConfigMap", "prod", "cm-1050").Spec))
		assert.Equal(t, "y", get(t, st, "ConfigMap", "prod", "cm-0600").Labels["l"])
	})
}
