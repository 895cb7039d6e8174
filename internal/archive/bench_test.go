package archive_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/archive/archivetest"
)

var (
	benchFilesMu sync.Mutex
	benchFiles   = map[string]string{}
)

// benchTarball writes a gzip tarball of n items of size bytes once per test
// binary run, into a temporary directory, and returns its path.
func benchTarball(b *testing.B, n, size int) string {
	b.Helper()
	benchFilesMu.Lock()
	defer benchFilesMu.Unlock()
	key := fmt.Sprintf("%dx%d", n, size)
	if p, ok := benchFiles[key]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "lethe-archive-bench-")
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(dir, key+".tgz")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	if err := archivetest.WriteN(f, n, size); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	benchFiles[key] = p
	return p
}

func TestMain(m *testing.M) {
	// The Reader decompresses on a goroutine of its own: none may outlive
	// the tests.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		for _, p := range benchFiles {
			os.RemoveAll(filepath.Dir(p)) // best-effort cleanup
		}
		os.Exit(code)
	}))
}

func readFile(b *testing.B, path string) (items int64) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rd, err := archive.NewReader(f, archive.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	for {
		_, err := rd.Next()
		if err == io.EOF {
			return items
		}
		if err != nil {
			b.Fatal(err)
		}
		items++
	}
}

// BenchmarkReader reads 200k items of 1 KiB: DESIGN §8's deletion workload.
func BenchmarkReader(b *testing.B) {
	const n, size = 200_000, 1024
	path := benchTarball(b, n, size)
	b.ReportAllocs()
	b.SetBytes(n * size)
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for b.Loop() {
		if got := readFile(b, path); got != n {
			b.Fatalf("read %d items, want %d", got, n)
		}
	}
	items := float64(n) * float64(b.N)
	b.ReportMetric(items/time.Since(start).Seconds(), "items/s")
	// CPU time per item is what to compare on a shared machine, where
	// wall-clock items/s depends on the neighbours.
	b.ReportMetric(float64(cpuTime()-cpu0)/items, "cpu-ns/item")
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReaderPeakMemory reports the peak heap in use while reading 100k
// and 1M items of 1 KiB. The budget for the whole deletion is 150 MiB.
func BenchmarkReaderPeakMemory(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			path := benchTarball(b, n, 1024)
			b.ResetTimer()
			var peak uint64
			for b.Loop() {
				p := peakHeap(func() { readFile(b, path) })
				peak = max(peak, p)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// peakHeap runs f and returns the highest HeapInuse sampled meanwhile, above
// the heap in use before f.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	runtime.ReadMemStats(&ms)
	p := max(peak.Load(), ms.HeapInuse)
	if p < base {
		return 0
	}
	return p - base
}
