package gc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
)

// readCounter counts the collector's reads of resources and of the graph
// (Get, GetByUID, Dependents, Referrers) on a real catalog. The collector
// runs one pass at a time here (Parallel 1), so plain counters do.
type readCounter struct {
	catalog.Store
	reads, dependents int
}

func (s *readCounter) Get(ctx context.Context, k catalog.Key) (*catalog.Resource, error) {
	s.reads++
	return s.Store.Get(ctx, k)
}

func (s *readCounter) GetByUID(ctx context.Context, uid string) (*catalog.Resource, error) {
	s.reads++
	return s.Store.GetByUID(ctx, uid)
}

// Dependents is read once by each step of a resource.
func (s *readCounter) Dependents(ctx context.Context, uid string) ([]*catalog.Resource, error) {
	s.reads++
	s.dependents++
	return s.Store.Dependents(ctx, uid)
}

func (s *readCounter) Referrers(ctx context.Context, k catalog.Key) ([]*catalog.Resource, error) {
	s.reads++
	return s.Store.Referrers(ctx, k)
}

// diamondPass builds the diamond of a security report (a0; then, each
// layer, a<i> and b<i> owned with blockOwnerDeletion by both of the layer
// above; a finalizer on the last layer, which holds it all), deletes a0
// Foreground and runs one step of a0's work item (which steps what it
// waits for inline, down to MaxInlineDepth). It returns the reads of that
// pass and how many of them were the Dependents read of a step.
func diamondPass(t *testing.T, st catalog.Store, layers int) (reads, steps int) {
	t.Helper()
	f := newFixture(t, st, false)
	rc := &readCounter{Store: st}
	c, err := gc.New(gc.Config{Store: rc, NoPlugins: true, Parallel: 1, PollInterval: 50 * time.Millisecond, Recheck: time.Hour, LeaseTTL: 5 * time.Second})
	require.NoError(t, err)
	pre := fmt.Sprintf("l%d-", layers)
	root := f.res("Node", pre+"a0")
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
			f.res("Node", fmt.Sprintf("%sa%d", pre, i), mods...),
			f.res("Node", fmt.Sprintf("%sb%d", pre, i), mods...),
		}
	}
	_, err = c.Delete(f.ctx, root.Key(), gc.DeleteOptions{Propagation: gc.Foreground})
	require.NoError(t, err)
	w, err := st.ClaimKey(f.ctx, gc.Queue, root.UID, "test", 5*time.Second)
	require.NoError(t, err)
	rc.reads, rc.dependents = 0, 0
	require.NoError(t, c.StepClaimed(f.ctx, w))
	// The pass reached the layers above MaxInlineDepth: they are all
	// Deleting now, the deepest of them waiting on their own items.
	for i := 1; i < min(layers, gc.MaxInlineDepth+1); i++ {
		for _, s := range []string{"a", "b"} {
			f.requirePhase(&catalog.Resource{Kind: "Node", Namespace: "prod", Name: fmt.Sprintf("%s%s%d", pre, s, i)}, catalog.PhaseDeleting)
		}
	}
	return rc.reads, rc.dependents
}

// TestOnePassStepsEachResourceOfADiamondOnce: a resource that several
// resources of one pass wait for (a diamond of owners) is stepped once in
// that pass, and its result reused for every parent: the pass's work
// grows with the resources it reaches, not with the paths to them
// (2^layers: a small manifest once kept the collector busy for minutes).
// What is left above linear is the cycle search of each waiting resource,
// which reads its ancestors (quadratic in the layers, not exponential).
func TestOnePassStepsEachResourceOfADiamondOnce(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		reads6, steps6 := diamondPass(t, st, 6)
		reads12, steps12 := diamondPass(t, st, 12)
		t.Logf("one pass: 6 layers %d reads, %d steps; 12 layers %d reads, %d steps", reads6, steps6, reads12, steps12)
		require.LessOrEqual(t, steps6, 2*6-1, "one pass steps each of the diamond's resources at most once")
		require.LessOrEqual(t, steps12, 2*12-1, "one pass steps each of the diamond's resources at most once")
		require.Less(t, reads12, 4*reads6, "twice the layers cost at most four times the reads")
	})
}
