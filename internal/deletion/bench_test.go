package deletion_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
)

// benchTarball returns a gzip tarball of n generated items of ~1 KiB, made
// once per size and cached in the OS temp folder.
func benchTarball(b *testing.B, n int) string {
	b.Helper()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("lethe-bench-%d.tar.gz", n))
	if _, err := os.Stat(path); err == nil {
		return path
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	require.NoError(b, err)
	require.NoError(b, archivetest.WriteN(f, n, 1024))
	require.NoError(b, f.Close())
	require.NoError(b, os.Rename(tmp, path))
	return path
}

// benchEnv is a SQLite catalog, a file storage and the out-of-process noop
// plugin.
type benchEnv struct {
	store catalog.Store
	blobs blobstore.Store
	del   *deletion.Deleter
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(dir, "lethe.db"), nil)
	require.NoError(b, err)
	b.Cleanup(func() { _ = st.Close() })
	bl, err := blobstore.Open(ctx, "file://"+filepath.Join(dir, "storage"))
	require.NoError(b, err)
	b.Cleanup(func() { _ = bl.Close() })
	pdir := filepath.Join(dir, "plugins")
	require.NoError(b, os.MkdirAll(pdir, 0o750))
	require.NoError(b, os.Link(noopBin, filepath.Join(pdir, "noop")))
	h, err := pluginhost.New(&pluginhost.Config{Dir: pdir})
	require.NoError(b, err)
	b.Cleanup(func() { _ = h.Close() })
	del, err := deletion.New(&deletion.Config{Store: st, Blobs: bl, Plugins: deletion.HostPlugins(h)})
	require.NoError(b, err)
	return &benchEnv{store: st, blobs: bl, del: del}
}

func (e *benchEnv) add(b *testing.B, name, tarball string) {
	b.Helper()
	ctx := context.Background()
	f, err := os.Open(tarball)
	require.NoError(b, err)
	defer f.Close()
	sum, err := archive.Validate(f, archive.Limits{})
	require.NoError(b, err)
	_, err = f.Seek(0, 0)
	require.NoError(b, err)
	key := backup.StorageKey(name)
	require.NoError(b, e.blobs.Put(ctx, key, f))
	bk := &backup.Backup{Resource: &catalog.Resource{Kind: backup.Kind, Name: name},
		Spec: backup.Spec{StorageKey: key, Digest: sum.Digest, Items: sum.Items}}
	require.NoError(b, bk.Encode())
	_, err = e.store.Create(ctx, bk.Resource)
	require.NoError(b, err)
}

// peakSampler samples the Go runtime's mapped memory (heap, stacks,
// runtime metadata: what the process holds from the OS for Go) until
// stopped, and reports the peak.
type peakSampler struct {
	stop chan struct{}
	done sync.WaitGroup
	peak uint64
}

func startPeak() *peakSampler {
	runtime.GC()
	p := &peakSampler{stop: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	read := func() {
		metrics.Read(sample)
		used := sample[0].Value.Uint64() - sample[1].Value.Uint64() - sample[2].Value.Uint64()
		p.peak = max(p.peak, used)
	}
	p.done.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-p.stop:
				read()
				return
			case <-t.C:
			}
		}
	})
	return p
}

func (p *peakSampler) Stop() float64 {
	close(p.stop)
	p.done.Wait()
	return float64(p.peak) / (1 << 20)
}

// BenchmarkDeleteBackup is DESIGN §8 row 1: a backup of 200k items of
// 1 KiB deleted end to end (validation pass, lifecycle, checkpoints, purge)
// through one out-of-process noop plugin. Budget: ≥ 50,000 items/s.
func BenchmarkDeleteBackup(b *testing.B) {
	const n = 200_000
	tarball := benchTarball(b, n)
	e := newBenchEnv(b)
	ctx := context.Background()
	b.ResetTimer()
	var elapsed time.Duration
	for i := range b.N {
		b.StopTimer()
		name := fmt.Sprintf("bench-%d", i)
		e.add(b, name, tarball)
		b.StartTimer()
		start := time.Now()
		rep, err := e.del.Delete(ctx, name, deletion.Options{Force: true})
		elapsed += time.Since(start)
		require.NoError(b, err)
		require.Equal(b, deletion.ResultPurged, rep.Result)
		require.EqualValues(b, n, rep.Counts["lethe.io/noop"].Done)
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "items/s")
}

// BenchmarkDeletePeakMemory is DESIGN §8 row 2: peak memory while deleting
// backups of 100k and 1M items; it must stay under 150 MiB and flat.
func BenchmarkDeletePeakMemory(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			tarball := benchTarball(b, n)
			e := newBenchEnv(b)
			ctx := context.Background()
			var peak float64
			var elapsed time.Duration
			for i := range b.N {
				b.StopTimer()
				name := fmt.Sprintf("bench-%d", i)
				e.add(b, name, tarball)
				b.StartTimer()
				p := startPeak()
				start := time.Now()
				rep, err := e.del.Delete(ctx, name, deletion.Options{Force: true})
				elapsed += time.Since(start)
				peak = max(peak, p.Stop())
				require.NoError(b, err)
				require.Equal(b, deletion.ResultPurged, rep.Result)
			}
			b.ReportMetric(peak, "peak-MiB")
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "items/s")
		})
	}
}
