package archive_test

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// TestReaderMemoryIsFlat reads tarballs of n and 10n items and checks that
// the live heap barely grows: bodies are streamed and dropped, and the only
// per-item state is the 16-byte key fingerprint. It samples the live heap
// after a forced GC every 1000 items, which is deterministic, where peak
// HeapInuse would mostly measure the GC's pacing (the benchmarks report
// that). Holding the items would add ~10 MiB per 10k items here.
func TestReaderMemoryIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~10 MiB of tarballs")
	}
	const n, size = 4_000, 1024
	peak := func(items int) uint64 {
		p := filepath.Join(t.TempDir(), "backup.tgz")
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, archivetest.WriteN(f, items, size))
		require.NoError(t, f.Close())
		var got int
		var heap uint64
		func() {
			f, err := os.Open(p)
			require.NoError(t, err)
			defer f.Close()
			rd, err := archive.NewReader(f, archive.Limits{})
			require.NoError(t, err)
			for {
				it, err := rd.Next()
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				if it.Ordinal != int64(got) || len(it.Object) < size/2 {
					t.Fatalf("item %d: ordinal %d, %d bytes", got, it.Ordinal, len(it.Object))
				}
				got++
				if got%1000 == 0 {
					heap = max(heap, liveHeap())
				}
			}
		}()
		require.Equal(t, items, got)
		return heap
	}
	small, large := peak(n), peak(10*n)
	t.Logf("live heap: %d items %.1f MiB, %d items %.1f MiB", n, float64(small)/(1<<20), 10*n, float64(large)/(1<<20))
	// The fingerprint table for 40k items is 1 MiB.
	require.Less(t, large, small+2<<20, "live heap grows with the tarball's size")
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
