package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

const wireBundle = `kind: Bundle
metadata: {name: shop}
spec:
  resources:
  - name: web
    object: {kind: Service, metadata: {namespace: shop}, spec: {image: web:1}}
  - name: worker
    object: {kind: Service, metadata: {namespace: shop}, spec: {image: worker:1}}
`

const wireBundleWebOnly = `kind: Bundle
metadata: {name: shop}
spec:
  resources:
  - name: web
    object: {kind: Service, metadata: {namespace: shop}, spec: {image: web:1}}
`

func openHome(t *testing.T, home string) catalog.Store {
	t.Helper()
	st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(home, "lethe.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestBundlePrunesThroughTheCollector: a member pruned without a delay is
// handed to the garbage collector (queued in its queue, a block reference
// refuses it as 'lethe delete' does), and is purged once the collector
// runs, with its dependents.
func TestBundlePrunesThroughTheCollector(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	ctx := context.Background()
	code, _, stderr := run(t, home, false, wireBundle, "apply", "-f", "-")
	require.Equal(t, 0, code, stderr)
	st := openHome(t, home)
	worker, err := st.Get(ctx, catalog.Key{Kind: "Service", Namespace: "shop", Name: "worker"})
	require.NoError(t, err)
	// A dependent of the member: the prune cascades to it.
	_, err = st.Create(ctx, &catalog.Resource{Kind: "Volume", Namespace: "shop", Name: "data",
		Owners: []catalog.OwnerRef{{UID: worker.UID, Kind: "Service", Name: "worker", BlockOwnerDeletion: true}}})
	require.NoError(t, err)
	// An Active referrer holding a block reference refuses the prune
	// (exit 5, naming it); the member stays Active.
	_, err = st.Create(ctx, &catalog.Resource{Kind: "Restore", Namespace: "shop", Name: "r",
		References: []catalog.Reference{{Kind: "Service", Namespace: "shop", Name: "worker", OnTargetDelete: catalog.RefBlock}}})
	require.NoError(t, err)
	before, err := st.CurrentVersion(ctx)
	require.NoError(t, err)
	for _, dry := range []string{"--dry-run", "--dry-run=false"} {
		code, out, stderr := run(t, home, false, wireBundleWebOnly, "apply", "-f", "-", dry)
		require.Equal(t, exitRefused, code, stderr)
		require.Empty(t, out, "a refused apply prints no report")
		require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
		require.Contains(t, stderr, "Restore/shop/r")
		require.Contains(t, stderr, "nothing applied")
	}
	after, err := st.CurrentVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused prune changed the catalog")
	w, err := st.Get(ctx, worker.Key())
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, w.Phase)
	code, _, stderr = run(t, home, false, "", "delete", "Restore", "r", "-n", "shop", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)

	code, out, stderr := run(t, home, false, wireBundleWebOnly, "apply", "-f", "-")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "1 deleted")
	w, err = st.Get(ctx, worker.Key())
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, w.Phase)
	require.Contains(t, w.Finalizers, catalog.FinalizerCascade)
	// The collector's own queue holds it: a running collector picks it up.
	_, err = st.GetWork(ctx, "gc", worker.UID)
	require.NoError(t, err)

	// The collector runs: member and dependent purged.
	code, _, stderr = run(t, home, false, "", "delete", "Service", "worker", "-n", "shop", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)
	for _, k := range []catalog.Key{worker.Key(), {Kind: "Volume", Namespace: "shop", Name: "data"}} {
		_, err := st.Get(ctx, k)
		require.ErrorIs(t, err, catalog.ErrNotFound, "%s", k)
	}
}

// TestDeleteFromFile: 'lethe delete -f' deletes what a manifest names
// through the collector; the dry run and a bad file change nothing.
func TestDeleteFromFile(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	ctx := context.Background()
	// Two documents; the second holds a block reference to the first, so
	// the first can go only once the second is Deleting.
	const two = `kind: Volume
metadata: {name: data, namespace: shop}
---
kind: Restore
metadata: {name: r, namespace: shop}
references:
- {kind: Volume, namespace: shop, name: data, onTargetDelete: block}
`
	code, _, stderr := run(t, home, false, two, "apply", "-f", "-")
	require.Equal(t, 0, code, stderr)
	st := openHome(t, home)
	keys := []catalog.Key{{Kind: "Volume", Namespace: "shop", Name: "data"}, {Kind: "Restore", Namespace: "shop", Name: "r"}}
	// Another resource the file does not name stays.
	_, err := st.Create(ctx, &catalog.Resource{Kind: "Volume", Namespace: "shop", Name: "other"})
	require.NoError(t, err)
	version := func() int64 {
		v, err := st.CurrentVersion(ctx)
		require.NoError(t, err)
		return v
	}
	before := version()

	code, out, stderr := run(t, home, false, two, "delete", "-f", "-", "--dry-run", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"kind": "CascadePlanList"`)
	require.Contains(t, out, `"name": "data"`)
	require.Contains(t, out, `"name": "r"`)
	require.Equal(t, before, version(), "the dry run changed the catalog")

	// A bad file: one line, nothing changed.
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(two+"---\nkind: Volume\nmetadata: {name: Bad_Name}\n"), 0o600))
	code, out, stderr = run(t, home, false, "", "delete", "-f", bad, "--yes", "--wait")
	require.Equal(t, exitError, code)
	require.Empty(t, out)
	require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	require.Contains(t, stderr, "document 3")
	require.Equal(t, before, version(), "a bad file changed the catalog")
	// A resource the catalog does not hold: exit 4, nothing changed.
	code, _, stderr = run(t, home, false, two+"---\nkind: Volume\nmetadata: {name: gone, namespace: shop}\n", "delete", "-f", "-", "--yes")
	require.Equal(t, exitNotFound, code, stderr)
	require.Equal(t, before, version(), "a missing resource changed the catalog")
	// Usage.
	code, _, _ = run(t, home, false, two, "delete", "Volume", "data", "-f", "-")
	require.Equal(t, exitUsage, code)

	code, out, stderr = run(t, home, false, two, "delete", "-f", "-", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "Volume/shop/data: purged")
	require.Contains(t, out, "Restore/shop/r: purged")
	for _, k := range keys {
		_, err := st.Get(ctx, k)
		require.ErrorIs(t, err, catalog.ErrNotFound, "%s", k)
	}
	_, err = st.Get(ctx, catalog.Key{Kind: "Volume", Namespace: "shop", Name: "other"})
	require.NoError(t, err)
}

// TestBundleDeletion: deleting a bundle deletes its members directly,
// those with a lethe.io/deletion-delay (Active or already Scheduled)
// included: they do not wait out their own delay. A forced delete of a
// Scheduled member skips its wait; an unforced one leaves it counting.
func TestBundleDeletion(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	ctx := context.Background()
	const shop = `kind: Bundle
metadata: {name: shop}
spec:
  resources:
  - name: web
    object: {kind: Service, metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}, spec: {image: web:1}}
  - name: cache
    object: {kind: Service, metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}, finalizers: [example.com/flush]}, spec: {image: redis:7}}
  - name: db
    object: {kind: Service, metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}, spec: {image: pg:16}}
  - name: queue
    object: {kind: Service, metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}, spec: {image: nats:2}}
  - name: worker
    object: {kind: Service, metadata: {namespace: shop}, spec: {image: worker:1}}
`
	// shop without cache, db and queue: both pruned, Scheduled for 1h.
	shopLess := strings.Replace(shop, `  - name: cache
    object: {kind: Service, metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}, finalizers: [example.com/flush]}, spec: {image: redis:7}}
  - name: db
    object: {kind: Service, metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}, spec: {image: pg:16}}
  - name: queue
    object: {kind: Service, metadata: {namespace: shop, annotations: {lethe.io/deletion-delay: 1h}}, spec: {image: nats:2}}
`, "", 1)
	code, _, stderr := run(t, home, false, shop, "apply", "-f", "-")
	require.Equal(t, 0, code, stderr)
	code, out, stderr := run(t, home, false, shopLess, "apply", "-f", "-")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "3 scheduled")
	st := openHome(t, home)
	// cache has a finalizer and a dependent of its own (the collector
	// moves it to Deleting, then waits); queue has neither (collected in
	// one batch).
	cache, err := st.Get(ctx, catalog.Key{Kind: "Service", Namespace: "shop", Name: "cache"})
	require.NoError(t, err)
	_, err = st.Create(ctx, &catalog.Resource{Kind: "Volume", Namespace: "shop", Name: "cache-data",
		Owners: []catalog.OwnerRef{{UID: cache.UID, Kind: "Service", Name: "cache", BlockOwnerDeletion: true}}})
	require.NoError(t, err)
	key := func(name string) catalog.Key { return catalog.Key{Kind: "Service", Namespace: "shop", Name: name} }
	phase := func(name string) catalog.Phase {
		r, err := st.Get(ctx, key(name))
		if errors.Is(err, catalog.ErrNotFound) {
			return catalog.PhasePurged
		}
		require.NoError(t, err)
		return r.Phase
	}
	require.Equal(t, catalog.PhaseScheduled, phase("cache"))
	require.Equal(t, catalog.PhaseScheduled, phase("db"))
	require.Equal(t, catalog.PhaseScheduled, phase("queue"))

	// Unforced: a Scheduled member stays in its window.
	code, out, stderr = run(t, home, false, "", "delete", "Service", "db", "-n", "shop", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "scheduled")
	require.Equal(t, catalog.PhaseScheduled, phase("db"))
	// Forced: the wait is skipped, the member purged.
	code, _, stderr = run(t, home, false, "", "delete", "Service", "db", "-n", "shop", "--yes", "--wait", "--force")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, catalog.PhasePurged, phase("db"))

	// The bundle: its cascade keeps the members' grace windows: web
	// (Active, with a delay) is Scheduled, cache and queue (Scheduled,
	// their owner edge kept) stay so, worker (Active) goes now; the
	// bundle waits for them (exit 3, the countdown explained).
	code, out, stderr = run(t, home, false, "", "delete", "Bundle", "shop", "--yes", "--wait")
	require.Equal(t, exitIncomplete, code, stderr)
	require.Contains(t, out, "Service/shop/web (Scheduled) [stuck]: dependent with blockOwnerDeletion of Bundle/shop; Scheduled: not being deleted yet; the grace window ends at")
	require.Equal(t, catalog.PhaseScheduled, phase("web"))
	require.Equal(t, catalog.PhaseScheduled, phase("cache"))
	require.Equal(t, catalog.PhaseScheduled, phase("queue"))
	require.Equal(t, catalog.PhasePurged, phase("worker"))
	// Asked again with --force: every window of its cascade is skipped;
	// the bundle waits for cache's finalizer only.
	code, _, stderr = run(t, home, false, "", "delete", "Bundle", "shop", "--yes", "--wait", "--force")
	require.Equal(t, exitIncomplete, code, stderr)
	require.Equal(t, catalog.PhaseDeleting, phase("cache"))
	code, _, stderr = run(t, home, false, "", "finalize", "Service", "cache", "-n", "shop", "example.com/flush")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = run(t, home, false, "", "delete", "Bundle", "shop", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)
	for _, n := range []string{"web", "worker", "cache", "queue"} {
		require.Equal(t, catalog.PhasePurged, phase(n), n)
	}
	_, err = st.Get(ctx, catalog.Key{Kind: "Volume", Namespace: "shop", Name: "cache-data"})
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = st.Get(ctx, catalog.Key{Kind: "Bundle", Name: "shop"})
	require.ErrorIs(t, err, catalog.ErrNotFound)
}
