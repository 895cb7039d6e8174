package gc_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// BenchmarkGraphChoice measures the two ways of finding dependents that
// DESIGN §6 asks to choose between, on the same ROOTSxDEPENDENTS catalog
// (LETHE_BENCH_CASCADE): rebuilding an in-memory owner graph from the
// catalog at start (Krake's way: every resource read and decoded once,
// then held), against the indexed owner-edge table (one Dependents query
// per owner, when it is collected). It reports the rebuild time and the
// heap the graph holds, and the time of the indexed lookups of every
// root.
func BenchmarkGraphChoice(b *testing.B) {
	roots, deps := cascadeSize(b)
	ctx := catalog.WithActor(context.Background(), "bench")
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(b.TempDir(), "c.db"), &catalog.Config{})
	require.NoError(b, err)
	defer st.Close()
	var rootUIDs []string
	for r := range roots {
		root, err := st.Create(ctx, &catalog.Resource{Kind: "Schedule", Namespace: "bench", Name: fmt.Sprintf("root-%05d", r)})
		require.NoError(b, err)
		rootUIDs = append(rootUIDs, root.UID)
		batch := make([]*catalog.Resource, 0, deps)
		for d := range deps {
			batch = append(batch, &catalog.Resource{Kind: "Snapshot", Namespace: "bench", Name: fmt.Sprintf("s-%05d-%05d", r, d),
				Owners: []catalog.OwnerRef{{UID: root.UID, Kind: root.Kind, Name: root.Name, BlockOwnerDeletion: true}}})
		}
		_, err = st.CreateBatch(ctx, batch)
		require.NoError(b, err)
	}
	b.ResetTimer()
	var rebuild, lookups time.Duration
	var heap uint64
	for range b.N {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		start := time.Now()
		graph := map[string][]string{} // owner UID → dependent UIDs
		opts := catalog.ListOptions{Limit: 1000}
		for {
			page, err := st.List(ctx, opts)
			require.NoError(b, err)
			for _, r := range page.Items {
				for _, o := range r.Owners {
					graph[o.UID] = append(graph[o.UID], r.UID)
				}
			}
			if page.Continue == "" {
				break
			}
			opts.Continue = page.Continue
		}
		rebuild += time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&m1)
		heap += m1.HeapAlloc - min(m1.HeapAlloc, m0.HeapAlloc)
		require.Len(b, graph, roots)
		runtime.KeepAlive(graph)

		start = time.Now()
		for _, uid := range rootUIDs {
			ds, err := st.Dependents(ctx, uid)
			require.NoError(b, err)
			require.Len(b, ds, deps)
		}
		lookups += time.Since(start)
	}
	b.ReportMetric(rebuild.Seconds()/float64(b.N), "rebuild-s")
	b.ReportMetric(float64(heap)/float64(b.N)/(1<<20), "graph-heap-MiB")
	b.ReportMetric(lookups.Seconds()/float64(b.N), "indexed-lookups-s")
}
