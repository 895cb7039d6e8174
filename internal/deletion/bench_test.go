package deletion_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
