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
