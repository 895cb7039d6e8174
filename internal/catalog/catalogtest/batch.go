package catalogtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testWriteBatch: creates and updates commit together or not at all.
func testWriteBatch(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	a := f.create(t, res("K", "", "a", map[string]string{"v": "1"}))
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)

	// An owner created earlier in the same batch, with a chosen uid.
	owner := res("K", "", "owner", nil)
	owner.UID = "0190b7a0-0000-7000-8000-000000000001"
	dep := res("K", "ns", "dep", nil)
	dep.Owners = []catalog.OwnerRef{{UID: owner.UID, Kind: "K", Name: "owner", BlockOwnerDeletion: true}}
	upd := *a
	upd.Labels = map[string]string{"v": "2"}
	out, err := f.s.WriteBatch(f.ctx, []catalog.Write{{Create: true, Resource: owner}, {Create: true, Resource: dep}, {Resource: &upd}})
	require.NoError(t, err)
	require.Len(t, out, 3)
	for i, r := range out {
		assert.Equal(t, v0+int64(i)+1, r.ResourceVersion)
	}
	assert.Equal(t, owner.UID, out[0].UID)
	assert.Equal(t, catalog.PhaseActive, out[1].Phase)
	assert.Equal(t, "2", out[2].Labels["v"])
	deps, err := f.s.Dependents(f.ctx, owner.UID)
	require.NoError(t, err)
	require.Len(t, deps, 1)
	assert.Equal(t, "dep", deps[0].Name)
	audit, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Name: "dep"})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	assert.Equal(t, "create", audit[0].Action)

	// Each failure rolls the whole batch back: a stale version, an
	// existing key, a missing owner, a key twice.
	stale := upd // resourceVersion of before the batch
	stale.Labels = map[string]string{"v": "stale"}
	missingOwner := res("K", "", "orphan", nil)
	missingOwner.Owners = []catalog.OwnerRef{{UID: "no-such-uid", Kind: "K", Name: "ghost"}}
	v1, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		ws  []catalog.Write
		err error
	}{
		"conflict":     {[]catalog.Write{{Create: true, Resource: res("K", "", "new", nil)}, {Resource: &stale}}, catalog.ErrConflict},
		"exists":       {[]catalog.Write{{Create: true, Resource: res("K", "", "new", nil)}, {Create: true, Resource: res("K", "", "a", nil)}}, catalog.ErrAlreadyExists},
		"missingOwner": {[]catalog.Write{{Create: true, Resource: res("K", "", "new", nil)}, {Create: true, Resource: missingOwner}}, catalog.ErrNotFound},
		"missingRow":   {[]catalog.Write{{Create: true, Resource: res("K", "", "new", nil)}, {Resource: res("K", "", "nope", nil)}}, catalog.ErrNotFound},
		"twice":        {[]catalog.Write{{Create: true, Resource: res("K", "", "new", nil)}, {Create: true, Resource: res("K", "", "new", nil)}}, catalog.ErrInvalid},
	} {
		_, err := f.s.WriteBatch(f.ctx, tc.ws)
		require.ErrorIs(t, err, tc.err, name)
		_, err = f.s.Get(f.ctx, key("K", "", "new"))
		require.ErrorIs(t, err, catalog.ErrNotFound, name)
		cur, err := f.s.Get(f.ctx, a.Key())
		require.NoError(t, err)
		assert.Equal(t, "2", cur.Labels["v"], name)
		v, err := f.s.CurrentVersion(f.ctx)
		require.NoError(t, err)
		assert.Equal(t, v1, v, "%s: a failed batch leaves the version counter alone", name)
	}
	// A Deleting resource cannot gain a finalizer through a batch either.
	_, err = f.s.Delete(f.ctx, a.Key(), catalog.DeleteOptions{})
	require.NoError(t, err)
	cur, err := f.s.Get(f.ctx, a.Key())
	require.NoError(t, err)
	cur.Finalizers = append(cur.Finalizers, "example.com/new")
	_, err = f.s.WriteBatch(f.ctx, []catalog.Write{{Resource: cur}})
	requireTransition(t, err, catalog.PhaseDeleting, catalog.PhaseDeleting)
}
