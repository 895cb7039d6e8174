package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

func benchEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func benchPort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	defer ln.Close()
	return ln.Addr().String()
}

// cpuSeconds reads a process's user+system CPU time from /proc.
func cpuSeconds(tb testing.TB, pid int) float64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(tb, err)
	// Fields after the command name (which is in parentheses).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ is 100 on Linux
}

// BenchmarkIdleServerScheduledMembers: a `lethe server` holding
// LETHE_BENCH_SCHEDULED (default 1,000,000) Scheduled bundle members, due
// in a day, with nothing to do. It reports the CPU seconds the server uses
// over LETHE_BENCH_IDLE_SECONDS (default 60) once idle, and how late 20
// probe members, due a few seconds after the start, entered Deleting
// (their deletion timestamp minus their due time, both from the catalog).
//
//	make bench BENCH=IdleServerScheduled BENCHPKGS=./internal/e2e/ BENCHTIME=1x
func BenchmarkIdleServerScheduledMembers(b *testing.B) {
	n := benchEnvInt("LETHE_BENCH_SCHEDULED", 1_000_000)
	idle := time.Duration(benchEnvInt("LETHE_BENCH_IDLE_SECONDS", 60)) * time.Second
	const probes = 20
	home := filepath.Join(b.TempDir(), "home")
	require.NoError(b, os.MkdirAll(home, 0o750))
	ctx := catalog.WithActor(context.Background(), "bench")
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(home, "lethe.db"), &catalog.Config{})
	require.NoError(b, err)
	bundle, err := st.Create(ctx, &catalog.Resource{Kind: "Bundle", Name: "big"})
	require.NoError(b, err)
	owner := []catalog.OwnerRef{{UID: bundle.UID, Kind: "Bundle", Name: "big", BlockOwnerDeletion: true}}
	load := time.Now()
	for i := 0; i < n; i += 1000 {
		var batch []*catalog.Resource
		for j := i; j < min(i+1000, n); j++ {
			batch = append(batch, &catalog.Resource{Kind: "Service", Namespace: "bench", Name: fmt.Sprintf("m-%07d", j), Owners: owner,
				Annotations: map[string]string{catalog.AnnotationDeletionDelay: "24h"}})
		}
		_, err := st.CreateBatch(ctx, batch)
		require.NoError(b, err)
		for _, r := range batch {
			_, err := st.Schedule(ctx, r.Key(), catalog.ScheduleOptions{Delay: 24 * time.Hour})
			require.NoError(b, err)
		}
	}
	b.Logf("loaded %d Scheduled members in %s", n, time.Since(load).Round(time.Second))
	// The probes come due 5 s after the server starts, 250 ms apart.
	start := time.Now()
	var keys []catalog.Key
	due := map[catalog.Key]time.Time{}
	for i := range probes {
		r, err := st.Create(ctx, &catalog.Resource{Kind: "Service", Namespace: "probe", Name: fmt.Sprintf("p-%02d", i), Owners: owner})
		require.NoError(b, err)
		r, err = st.Schedule(ctx, r.Key(), catalog.ScheduleOptions{Delay: 5*time.Second + time.Duration(i)*250*time.Millisecond})
		require.NoError(b, err)
		keys = append(keys, r.Key())
		due[r.Key()] = *r.DeletionDueAt
	}
	require.NoError(b, st.Close())

	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, filepath.Join(bin, "lethe"), "server", "--no-plugins", "--metrics-addr", benchPort(b))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LETHE_HOME=" + home}
	require.NoError(b, cmd.Start())
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	if d := time.Until(start.Add(5*time.Second + probes*250*time.Millisecond + 2*time.Second)); d > 0 {
		time.Sleep(d) // every probe is due by now
	}
	b.ResetTimer()
	c0 := cpuSeconds(b, cmd.Process.Pid)
	time.Sleep(idle)
	c1 := cpuSeconds(b, cmd.Process.Pid)
	b.StopTimer()

	st, err = drivers.Open(ctx, "sqlite://"+filepath.Join(home, "lethe.db"), &catalog.Config{})
	require.NoError(b, err)
	defer st.Close()
	var worst, total time.Duration
	for _, k := range keys {
		r, err := st.Get(ctx, k)
		require.NoError(b, err)
		require.Equal(b, catalog.PhaseDeleting, r.Phase, "%s never left Scheduled", k)
		late := r.DeletionTimestamp.Sub(due[k])
		worst = max(worst, late)
		total += late
	}
	b.ReportMetric(float64(n), "scheduled")
	b.ReportMetric((c1-c0)*60/idle.Seconds(), "cpu-s/60s")
	b.ReportMetric(float64(worst.Milliseconds()), "max-late-ms")
	b.ReportMetric(float64(total.Milliseconds())/probes, "mean-late-ms")
}
