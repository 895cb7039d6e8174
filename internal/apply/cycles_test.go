package apply_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
)

// chain is n Things, each owned by the one before it (kind: owner
// references) or holding a block reference to it (kind: references), and,
// with closed, the first owned by the last.
func chain(n int, refs, closed bool) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\nkind: Thing\nmetadata:\n  name: t%d\n", i)
		prev := i - 1
		if i == 0 {
			if !closed {
				continue
			}
			prev = n - 1
		}
		if refs {
			fmt.Fprintf(&b, "references: [{kind: Thing, name: t%d, onTargetDelete: block}]\n", prev)
		} else {
			fmt.Fprintf(&b, "  ownerReferences: [{kind: Thing, name: t%d}]\n", prev)
		}
	}
	return b.String()
}

// TestCycleCheckIsLinearInALongChain: the cycle check visits each resource
// of a chain a bounded number of times, whether the chain is open (no
// cycle) or closed (one cycle through every link), by owners and by block
// references. A walk from each link, as the check once did, read the
// chain above it again for each: a 170 KB manifest of 2,000 links took
// 25 s of CPU and held the catalog's write lock for 50 s.
func TestCycleCheckIsLinearInALongChain(t *testing.T) {
	const n = 2000
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		for _, refs := range []bool{false, true} {
			for _, closed := range []bool{false, true} {
				steps := 0
				opts := apply.Options{DryRun: true, TakeDocuments: true}
				apply.WithCycleStep(&opts, func() { steps++ })
				_, err := e.Apply(ctx, docs(t, chain(n, refs, closed)), opts)
				if closed {
					require.ErrorIs(t, err, catalog.ErrCycle, "references %v", refs)
				} else {
					require.NoError(t, err, "references %v", refs)
				}
				require.LessOrEqual(t, steps, 3*n, "references %v, closed %v: %d steps for %d links", refs, closed, steps, n)
			}
		}
	})
}
