package deletion_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
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

// newBenchEnv is a SQLite catalog, a file storage and the out-of-process
// noop plugin.
func newBenchEnv(b *testing.B) *deletiontest.Env {
	b.Helper()
	return deletiontest.New(b, deletiontest.Options{Plugins: []string{noopBin}})
}

// addTarball registers the backup name from a tarball file.
func addTarball(b *testing.B, e *deletiontest.Env, name, tarball string) {
	b.Helper()
	f, err := os.Open(tarball)
	require.NoError(b, err)
	defer f.Close()
	e.AddBackup(name, f, nil, nil)
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
		addTarball(b, e, name, tarball)
		b.StartTimer()
		start := time.Now()
		rep, err := e.Deleter.Delete(ctx, name, deletion.Options{Force: true})
		elapsed += time.Since(start)
		require.NoError(b, err)
		require.Equal(b, deletion.ResultPurged, rep.Result)
		require.EqualValues(b, n, rep.Counts["lethe.io/noop"].Done)
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "items/s")
}

// letheBin builds cmd/lethe once, for the memory benchmark.
var letheBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "lethe-bench-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "lethe")
	return bin, deletiontest.Build(bin, "../../cmd/lethe")
})

// watchHWM polls a process's VmHWM (peak resident set of its current image,
// in KiB) until it exits, and returns a function that gives the last value
// read. ru_maxrss would not do: Linux carries the forking parent's resident
// size into the child's across fork and exec.
func watchHWM(pid int) func() int64 {
	var last atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		path := fmt.Sprintf("/proc/%d/status", pid)
		for {
			data, err := os.ReadFile(path)
			if err != nil {
				return
			}
			for line := range strings.Lines(string(data)) {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					var kib int64
					if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kib); err == nil && kib > 0 {
						last.Store(kib)
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() int64 { <-done; return last.Load() }
}

// BenchmarkDeletePeakMemory is DESIGN §8 row 2: the peak resident memory
// of the lethe process (VmHWM: everything the OS gave it) while it
// deletes backups of 100k and 1M items through the out-of-process noop
// plugin. Budget: under 150 MiB, and flat as the backup grows.
func BenchmarkDeletePeakMemory(b *testing.B) {
	bin, err := letheBin()
	require.NoError(b, err)
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			tarball := benchTarball(b, n)
			var peak float64
			var elapsed time.Duration
			for i := range b.N {
				b.StopTimer()
				home := b.TempDir()
				require.NoError(b, os.MkdirAll(filepath.Join(home, "plugins"), 0o750))
				require.NoError(b, os.Link(noopBin, filepath.Join(home, "plugins", "noop")))
				lethe := func(args ...string) *exec.Cmd {
					cmd := exec.Command(bin, args...)
					cmd.Env = append(os.Environ(), "LETHE_HOME="+home)
					return cmd
				}
				name := fmt.Sprintf("bench-%d", i)
				out, err := lethe("backup", "create", name, "--from", tarball).CombinedOutput()
				require.NoError(b, err, "%s", out)
				b.StartTimer()
				start := time.Now()
				cmd := lethe("backup", "delete", name, "--yes", "--force")
				var buf bytes.Buffer
				cmd.Stdout, cmd.Stderr = &buf, &buf
				require.NoError(b, cmd.Start())
				hwm := watchHWM(cmd.Process.Pid)
				err = cmd.Wait()
				elapsed += time.Since(start)
				require.NoError(b, err, "%s", buf.String())
				require.Contains(b, buf.String(), "deleted")
				peak = max(peak, float64(hwm())/1024)
			}
			b.ReportMetric(peak, "peak-RSS-MiB")
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "items/s")
		})
	}
}

// BenchmarkSlowItemWindow is the reordering bound (ReorderWindow) against
// DESIGN §8's memory budget: a 200k-item backup whose item 10 takes 10 s
// (its ack is held back that long) through the out-of-process noop
// plugin. Every item after it finishes first and waits for it, but the
// feeder stops ReorderWindow ordinals past it, so memory stays flat
// instead of growing with the backup. Budget: peak heap and peak RSS of
// the process under 150 MiB. The benchmark runs with the soft memory
// limit cmd/lethe sets (48 MiB), and the peak RSS is counted from the
// start of the deletion (VmHWM reset through /proc/self/clear_refs).
func BenchmarkSlowItemWindow(b *testing.B) {
	const (
		n    = 200_000
		slow = 10
		wait = 10 * time.Second
	)
	tarball := benchTarball(b, n)
	e := newBenchEnv(b)
	g := newGate(deletion.HostPlugins(e.Host))
	del, err := deletion.New(&deletion.Config{Store: e.Store, Blobs: e.Blobs, Plugins: g})
	require.NoError(b, err)
	ctx := context.Background()
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(48 << 20))
	var peakHeap, peakRSS float64
	for i := range b.N {
		b.StopTimer()
		name := fmt.Sprintf("slow-%d", i)
		addTarball(b, e, name, tarball)
		runtime.GC()
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM
		h := g.hold("lethe.io/noop", slow)
		stop := make(chan struct{})
		sampled := make(chan float64)
		go func() { sampled <- sampleHeap(stop) }()
		b.StartTimer()
		go func() {
			<-h.arrived
			time.Sleep(wait) // the slow item: a plugin taking 10 s
			close(h.release)
		}()
		rep, err := del.Delete(ctx, name, deletion.Options{Force: true})
		b.StopTimer()
		close(stop)
		peakHeap = max(peakHeap, <-sampled)
		peakRSS = max(peakRSS, float64(selfHWM())/1024)
		require.NoError(b, err)
		require.Equal(b, deletion.ResultPurged, rep.Result)
		require.EqualValues(b, n, rep.Counts["lethe.io/noop"].Done)
		b.StartTimer()
	}
	b.ReportMetric(peakHeap, "peak-heap-MiB")
	b.ReportMetric(peakRSS, "peak-RSS-MiB")
	if peakHeap >= 150 || peakRSS >= 150 {
		b.Errorf("over the memory budget of 150 MiB: heap %.0f MiB, RSS %.0f MiB", peakHeap, peakRSS)
	}
}

// sampleHeap returns the largest in-use heap seen, in MiB, until stop.
func sampleHeap(stop <-chan struct{}) float64 {
	var peak uint64
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
		select {
		case <-stop:
			return float64(peak) / (1 << 20)
		case <-t.C:
		}
	}
}

// selfHWM is this process's peak resident set (VmHWM), in KiB.
func selfHWM() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			_, _ = fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kib)
			return kib
		}
	}
	return 0
}
