package catalogtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// BenchResourcesEnv sets how many resources BenchInsert loads (default
// 1,000,000; use fewer for a quick run).
const BenchResourcesEnv = "LETHE_BENCH_RESOURCES"

func benchResources(b *testing.B) int {
	v := os.Getenv(BenchResourcesEnv)
	if v == "" {
		return 1_000_000
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, BenchResourcesEnv)
	return n
}

const (
	benchBatch      = 1000
	benchPerOwner   = 100 // every 100 resources share an owner
	benchDependents = 10_000
	benchWorkers    = 4
)

// BenchInsert loads LETHE_BENCH_RESOURCES resources with owner edges
// (one owner per 100 resources) into a fresh store, in CreateBatch
// transactions of 1000, and reports resources/s.
func BenchInsert(b *testing.B, newStore NewStoreFunc) {
	n := benchResources(b)
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := newStore(b, nil)
		b.StartTimer()
		start := time.Now()
		batch := make([]*catalog.Resource, 0, benchBatch)
		var owner string
		for j := range n {
			r := &catalog.Resource{Kind: "Snapshot", Namespace: "bench", Name: fmt.Sprintf("r%08d", j),
				Labels: map[string]string{"backup": "nightly"}}
			if j%benchPerOwner == 0 {
				r.Kind = "Backup"
				r.UID = fmt.Sprintf("owner-%08d", j)
				owner = r.UID
			} else {
				r.Owners = []catalog.OwnerRef{{UID: owner, Kind: "Backup", Name: "owner", BlockOwnerDeletion: true}}
			}
			batch = append(batch, r)
			if len(batch) == benchBatch || j == n-1 {
				if _, err := s.CreateBatch(ctx, batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		total += time.Since(start)
		b.StopTimer()
		deps, err := s.Dependents(ctx, "owner-00000000")
		require.NoError(b, err)
		require.Len(b, deps, min(n, benchPerOwner)-1)
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/total.Seconds(), "resources/s")
}

// BenchDependents looks up the dependents of a resource with 10,000 of
// them (20 lookups per b.N, so -benchtime 1x means something), and
// reports lookups/s.
func BenchDependents(b *testing.B, newStore NewStoreFunc) {
	ctx := context.Background()
	s := newStore(b, nil)
	owner, err := s.Create(ctx, &catalog.Resource{Kind: "Backup", Name: "owner"})
	require.NoError(b, err)
	var batch []*catalog.Resource
	for j := range benchDependents {
		batch = append(batch, &catalog.Resource{Kind: "Snapshot", Name: fmt.Sprintf("d%06d", j),
			Owners: []catalog.OwnerRef{{UID: owner.UID, Kind: "Backup", Name: "owner"}}})
		if len(batch) == benchBatch {
			_, err := s.CreateBatch(ctx, batch)
			require.NoError(b, err)
			batch = batch[:0]
		}
	}
	// Noise: other owners' dependents.
	for j := range benchBatch {
		batch = append(batch, &catalog.Resource{Kind: "Snapshot", Name: fmt.Sprintf("other%06d", j),
			Owners: []catalog.OwnerRef{{UID: "someone-else", Kind: "Backup", Name: "x"}}})
	}
	_, err = s.CreateBatch(ctx, batch)
	require.NoError(b, err)
	const perOp = 20
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N*perOp; i++ {
		deps, err := s.Dependents(ctx, owner.UID)
		if err != nil {
			b.Fatal(err)
		}
		if len(deps) != benchDependents {
			b.Fatalf("got %d dependents", len(deps))
		}
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N*perOp)/elapsed.Seconds(), "lookups/s")
	b.ReportMetric(float64(b.N*perOp*benchDependents)/elapsed.Seconds(), "dependents/s")
}

// BenchClaims has 4 concurrent workers claim 2000×b.N work items one at
// a time, and reports claims/s.
func BenchClaims(b *testing.B, newStore NewStoreFunc) {
	ctx := context.Background()
	s := newStore(b, nil)
	items := int64(2000 * b.N)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > items {
					return
				}
				if _, err := s.Enqueue(ctx, catalog.WorkItem{Queue: "bench", Key: fmt.Sprintf("k%09d", i)}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var claimed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for w := range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("worker-%d", w)
			for {
				got, err := s.Claim(ctx, "bench", holder, time.Hour, 1)
				if err != nil {
					b.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				claimed.Add(int64(len(got)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if claimed.Load() != items {
		b.Fatalf("claimed %d of %d", claimed.Load(), items)
	}
	b.ReportMetric(float64(items)/elapsed.Seconds(), "claims/s")
}

// BenchCollect loads 20 owners with 1,000 leaf dependents each (10% with
// an allowDangling reference), then collects each owner's dependents with
// one CollectBatch of 1,000 items, as the collector's cascade does, and
// reports resources/s. The figure is the catalog's share of the
// collector's no-plugin cascade throughput.
func BenchCollect(b *testing.B, newStore NewStoreFunc) {
	const owners, perOwner = 20, 1000
	ctx := catalog.WithActor(context.Background(), "bench")
	var total, cpu time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := newStore(b, nil)
		items := make([][]catalog.CollectItem, owners)
		for o := range owners {
			batch := make([]*catalog.Resource, 0, perOwner)
			for d := range perOwner {
				r := &catalog.Resource{Kind: "Snapshot", Namespace: "bench", Name: fmt.Sprintf("s-%03d-%05d", o, d),
					Owners: []catalog.OwnerRef{{UID: fmt.Sprintf("owner-%03d", o), Kind: "Schedule", Name: "owner", BlockOwnerDeletion: true}}}
				if d%10 == 0 {
					r.References = []catalog.Reference{{Kind: "Database", Namespace: "bench", Name: "orders", OnTargetDelete: catalog.RefAllowDangling}}
				}
				batch = append(batch, r)
			}
			got, err := s.CreateBatch(ctx, batch)
			require.NoError(b, err)
			for _, r := range got {
				items[o] = append(items[o], catalog.CollectItem{UID: r.UID, ResourceVersion: r.ResourceVersion, Reason: "owner deleted"})
			}
		}
		b.StartTimer()
		start, cpu0 := time.Now(), processCPU()
		for o := range owners {
			gone, err := s.CollectBatch(ctx, items[o])
			if err != nil {
				b.Fatal(err)
			}
			if len(gone) != perOwner {
				b.Fatalf("collected %d of %d", len(gone), perOwner)
			}
		}
		total += time.Since(start)
		cpu += processCPU() - cpu0
	}
	b.ReportMetric(float64(owners*perOwner*b.N)/total.Seconds(), "resources/s")
	// CPU time is steadier than wall time on a shared machine; on
	// PostgreSQL it leaves out the server's share.
	b.ReportMetric(float64(cpu.Microseconds())/float64(owners*perOwner*b.N), "cpu-µs/resource")
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
