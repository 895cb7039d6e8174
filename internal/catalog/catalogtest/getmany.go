package catalogtest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testGetMany: GetMany answers every key in order, across the chunks a
// driver reads them in (more keys than one query takes), nil for a
// missing key, and a key asked twice twice.
func testGetMany(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const n = 700 // more than two of sqlstore's chunks of 256
	var rs []*catalog.Resource
	for i := range n {
		rs = append(rs, res("K", "ns", fmt.Sprintf("r-%03d", i), map[string]string{"i": fmt.Sprint(i)}))
	}
	_, err := f.s.CreateBatch(f.ctx, rs)
	require.NoError(t, err)
	var keys []catalog.Key
	for i := range n {
		keys = append(keys, catalog.Key{Kind: "K", Namespace: "ns", Name: fmt.Sprintf("r-%03d", i)})
		if i%100 == 0 {
			keys = append(keys, catalog.Key{Kind: "K", Namespace: "ns", Name: fmt.Sprintf("missing-%03d", i)})
		}
	}
	first := 4 // keys[4] is r-003 (keys[1] is missing-000)
	require.Equal(t, "r-003", keys[first].Name)
	keys = append(keys, keys[first], catalog.Key{Kind: "K", Name: "r-001"}) // asked twice; another namespace
	out, err := f.s.GetMany(f.ctx, keys)
	require.NoError(t, err)
	require.Len(t, out, len(keys))
	found := 0
	for i, k := range keys {
		if k.Namespace == "" || len(k.Name) > len("r-000") {
			assert.Nil(t, out[i], "%s does not exist", k)
			continue
		}
		require.NotNil(t, out[i], "%s (key %d of %d)", k, i, len(keys))
		assert.Equal(t, k, out[i].Key())
		assert.Equal(t, k.Name[2:], fmt.Sprintf("%03s", out[i].Labels["i"]))
		found++
	}
	assert.Equal(t, n+1, found)
	assert.NotSame(t, out[first], out[len(out)-2], "a key asked twice gets two copies")
	out[first].Labels["i"] = "changed"
	assert.Equal(t, "3", out[len(out)-2].Labels["i"])
	none, err := f.s.GetMany(f.ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, none)
}

// testWriteEach: WriteEach asks for each write in order and hands back
// each stored resource, all in one transaction; a cycle closed by the
// last write of a batch with more candidates than one query of the
// cycle check takes (each of the 1,200 has an owner) is refused, and
// nothing of the batch is written.
func testWriteEach(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	owner := f.create(t, res("N", "", "owner", nil))
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	const n = 1200
	node := func(i int) *catalog.Resource {
		return withOwner(res("N", "ns", fmt.Sprintf("n%04d", i), nil), owner, false)
	}
	var asked, stored []int
	err = f.s.WriteEach(f.ctx, n, func(i int) (catalog.Write, error) {
		asked = append(asked, i)
		r := node(i)
		switch i {
		case 1000:
			r = withRef(r, node(n-1), catalog.RefBlock)
		case n - 1:
			r = withRef(r, node(1000), catalog.RefBlock)
		}
		return catalog.Write{Create: true, Resource: r}, nil
	}, func(i int, r *catalog.Resource) {
		stored = append(stored, i)
	})
	var ce *catalog.CycleError
	require.ErrorAs(t, err, &ce, "the last write closes a cycle with the 1,001st")
	msg := catalog.FormatCycle(ce.Edges)
	assert.Len(t, ce.Edges, 2, msg)
	assert.Contains(t, msg, "N/ns/n1000 holds a block reference to N/ns/n1199")
	assert.Contains(t, msg, "N/ns/n1199 holds a block reference to N/ns/n1000")
	v, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, v0, v, "nothing of a refused batch is written")
	_, err = f.s.Get(f.ctx, node(0).Key())
	require.ErrorIs(t, err, catalog.ErrNotFound)
	require.Len(t, asked, n)
	assert.Len(t, stored, n, "each write is handed back as it is made")

	// Without the cycle: every write stored, in order, with consecutive
	// versions.
	var versions []int64
	err = f.s.WriteEach(f.ctx, n, func(i int) (catalog.Write, error) {
		return catalog.Write{Create: true, Resource: node(i)}, nil
	}, func(i int, r *catalog.Resource) {
		assert.Equal(t, fmt.Sprintf("n%04d", i), r.Name)
		assert.NotEmpty(t, r.UID)
		versions = append(versions, r.ResourceVersion)
	})
	require.NoError(t, err)
	require.Len(t, versions, n)
	for i, v := range versions {
		assert.Equal(t, v0+int64(i)+1, v)
	}
	deps, err := f.s.Dependents(f.ctx, owner.UID)
	require.NoError(t, err)
	assert.Len(t, deps, n)
}
