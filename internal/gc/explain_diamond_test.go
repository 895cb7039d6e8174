package gc_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// TestExplainNamesAResourceSeveralParentsWaitForOnce: in a diamond of
// owners (each layer's two resources owned by both of the layer above),
// explain explains each resource once and names it again where another
// parent waits for it, so the tree grows with the graph, not with the
// paths through it (2^layers: a small manifest once made explain and
// delete --wait hang). What is stuck at the bottom still shows at the top.
func TestExplainNamesAResourceSeveralParentsWaitForOnce(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, false)
		const layers = 10
		root := f.res("Node", "a0")
		above := []*catalog.Resource{root}
		for i := 1; i < layers; i++ {
			var mods []func(*catalog.Resource)
			for _, o := range above {
				mods = append(mods, ownedBy(o, true))
			}
			if i == layers-1 {
				mods = append(mods, finalizer("example.com/hold"))
			}
			above = []*catalog.Resource{
				f.res("Node", fmt.Sprintf("a%d", i), mods...),
				f.res("Node", fmt.Sprintf("b%d", i), mods...),
			}
		}
		require.Equal(t, gc.OutcomeStuck, f.del(root, gc.Foreground))
		e, err := f.c.Explain(f.ctx, root.Key())
		require.NoError(t, err)
		require.True(t, e.Stuck, "the finalizer at the bottom holds the root: %s", e.Reason)
		var count func(*gc.Explanation) int
		count = func(x *gc.Explanation) int {
			n := 1
			for _, c := range x.WaitingFor {
				n += count(c)
			}
			return n
		}
		nodes := count(e)
		require.Less(t, nodes, 4*2*layers, "explain printed %d nodes for %d resources", nodes, 2*layers-1)
		again := 0
		var walk func(*gc.Explanation)
		walk = func(x *gc.Explanation) {
			if x.Reason != "" && len(x.WaitingFor) == 0 && x.Phase == catalog.PhaseDeleting && containsExplainedAbove(x.Reason) {
				again++
				require.True(t, x.Stuck, "a resource named again keeps its stuck mark: %s", x.Resource)
			}
			for _, c := range x.WaitingFor {
				walk(c)
			}
		}
		walk(e)
		require.Positive(t, again, "the second parent names the resource again")
	})
}

func containsExplainedAbove(s string) bool {
	const w = "explained above"
	return len(s) >= len(w) && s[len(s)-len(w):] == w
}
