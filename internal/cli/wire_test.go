package cli

import (
	"context"
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
	code, _, stderr = run(t, home, false, wireBundleWebOnly, "apply", "-f", "-")
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stderr, "Restore/shop/r")
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
	require.Contains(t, out, `"plans"`)
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
