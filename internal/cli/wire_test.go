package cli

import (
	"context"
	"path/filepath"
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
