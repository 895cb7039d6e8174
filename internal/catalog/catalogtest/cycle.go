package catalogtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

func withOwner(r *catalog.Resource, o *catalog.Resource, block bool) *catalog.Resource {
	c := *r
	c.Owners = append(append([]catalog.OwnerRef{}, r.Owners...), catalog.OwnerRef{UID: o.UID, Kind: o.Kind, Name: o.Name, BlockOwnerDeletion: block})
	return &c
}

func withRef(r *catalog.Resource, t *catalog.Resource, on catalog.OnTargetDelete) *catalog.Resource {
	c := *r
	c.References = append(append([]catalog.Reference{}, r.References...), catalog.Reference{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name, OnTargetDelete: on})
	return &c
}

// testWriteClosingACycleIsRefused: a write that would close a cycle of
// deletion edges (owner edges, block and cascade references, in any mix)
// is refused with a *CycleError naming it, and changes nothing; a write
// that adds no edge, and edges that close no cycle, pass.
func testWriteClosingACycleIsRefused(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	x := f.create(t, res("Node", "", "x", nil))
	y := f.create(t, res("Node", "", "y", nil))
	y, err := f.s.Update(f.ctx, withOwner(y, x, true))
	require.NoError(t, err)
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)

	// x blocks y, and y is owned by x: Update.
	_, err = f.s.Update(f.ctx, withRef(x, y, catalog.RefBlock))
	var ce *catalog.CycleError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, catalog.ErrCycle)
	assert.Equal(t, "cycle: Node/x owns Node/y; Node/x holds a block reference to Node/y", catalog.FormatCycle(ce.Edges))
	// The same through a batch, and through an owner edge.
	_, err = f.s.WriteBatch(f.ctx, []catalog.Write{{Resource: withOwner(x, y, false)}})
	require.ErrorIs(t, err, catalog.ErrCycle)
	v, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, v0, v, "a refused write changes nothing")
	cur, err := f.s.Get(f.ctx, x.Key())
	require.NoError(t, err)
	assert.Empty(t, cur.References)
	assert.Empty(t, cur.Owners)

	// A cycle of block references alone, and of cascade references, made
	// in one batch of creates.
	r1 := res("R", "ns", "r1", nil)
	r2 := res("R", "ns", "r2", nil)
	_, err = f.s.WriteBatch(f.ctx, []catalog.Write{{Create: true, Resource: withRef(r1, r2, catalog.RefBlock)}, {Create: true, Resource: withRef(r2, r1, catalog.RefBlock)}})
	require.ErrorAs(t, err, &ce)
	assert.Len(t, ce.Edges, 2)
	_, err = f.s.CreateBatch(f.ctx, []*catalog.Resource{withRef(r1, r2, catalog.RefCascade), withRef(r2, r1, catalog.RefCascade)})
	require.ErrorIs(t, err, catalog.ErrCycle)
	_, err = f.s.Get(f.ctx, r1.Key())
	require.ErrorIs(t, err, catalog.ErrNotFound)
	// Mixed, three long: a owns b, b holds a cascade reference to... c,
	// c holds a block reference to a.
	a := f.create(t, res("M", "", "a", nil))
	b := f.create(t, withOwner(res("M", "", "b", nil), a, true))
	c := f.create(t, withRef(res("M", "", "c", nil), b, catalog.RefCascade))
	_, err = f.s.Update(f.ctx, withRef(a, c, catalog.RefBlock))
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "cycle: M/a owns M/b; M/c holds a cascade reference to M/b; M/a holds a block reference to M/c", catalog.FormatCycle(ce.Edges))
	// unset and allowDangling references are no deletion edges.
	_, err = f.s.Update(f.ctx, withRef(withRef(a, c, catalog.RefUnset), c, catalog.RefAllowDangling))
	require.NoError(t, err)
	// A self-owned resource.
	z := f.create(t, res("Node", "", "z", nil))
	_, err = f.s.Update(f.ctx, withOwner(z, z, false))
	require.ErrorIs(t, err, catalog.ErrCycle)
}

// testConcurrentWritesNeverStoreACycle races pairs of writes that each
// add one half of a cycle: the check runs inside each write's transaction,
// under the lock every writer of edges takes, so at most one of each pair
// commits and no cycle is ever stored.
func testConcurrentWritesNeverStoreACycle(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const pairs = 24
	type pair struct{ x, y *catalog.Resource }
	ps := make([]pair, pairs)
	for i := range ps {
		ps[i] = pair{f.create(t, res("P", "", fmt.Sprintf("x%d", i), nil)), f.create(t, res("P", "", fmt.Sprintf("y%d", i), nil))}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([][2]error, pairs)
	for i, p := range ps {
		halves := [2]*catalog.Resource{withOwner(p.y, p.x, true), withRef(p.x, p.y, catalog.RefBlock)}
		if i%3 == 1 {
			halves[1] = withOwner(p.x, p.y, true)
		}
		if i%3 == 2 {
			halves = [2]*catalog.Resource{withRef(p.y, p.x, catalog.RefCascade), withRef(p.x, p.y, catalog.RefBlock)}
		}
		for j, h := range halves {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if j == 0 {
					_, errs[i][j] = f.s.Update(f.ctx, h)
				} else {
					_, errs[i][j] = f.s.WriteBatch(f.ctx, []catalog.Write{{Resource: h}})
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for i, p := range ps {
		for _, err := range errs[i] {
			if err != nil && !errors.Is(err, catalog.ErrCycle) {
				t.Fatalf("pair %d: %v", i, err)
			}
		}
		assert.False(t, errs[i][0] == nil && errs[i][1] == nil, "pair %d: both halves of a cycle were stored", i)
		assert.False(t, errs[i][0] != nil && errs[i][1] != nil, "pair %d: both refused", i)
		x, err := f.s.Get(f.ctx, p.x.Key())
		require.NoError(t, err)
		y, err := f.s.Get(f.ctx, p.y.Key())
		require.NoError(t, err)
		edges := len(x.Owners) + len(x.References) + len(y.Owners) + len(y.References)
		assert.Equal(t, 1, edges, "pair %d: exactly one half stored", i)
	}
}
