package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkIdleServerRetentionPolicies: a `lethe server` holding
// LETHE_BENCH_POLICIES (default 100) enforced RetentionPolicies, applied
// through the binary, with nothing changing. It reports the CPU seconds
// the server uses over LETHE_BENCH_IDLE_SECONDS (default 60) once started:
// policies are evaluated on their interval (10m) and when backups or
// policies change, never by polling.
//
//	make bench BENCH=IdleServerRetention BENCHPKGS=./internal/e2e/ BENCHTIME=1x
func BenchmarkIdleServerRetentionPolicies(b *testing.B) {
	n := benchEnvInt("LETHE_BENCH_POLICIES", 100)
	idle := time.Duration(benchEnvInt("LETHE_BENCH_IDLE_SECONDS", 60)) * time.Second
	home := filepath.Join(b.TempDir(), "home")
	require.NoError(b, os.MkdirAll(home, 0o700))
	var docs []string
	for i := range n {
		docs = append(docs, fmt.Sprintf("kind: RetentionPolicy\nmetadata: {name: p%03d}\nspec:\n  selector: team=t%03d\n  keepLast: 3\n  keepDaily: 7\n  mode: enforce\n", i, i))
	}
	manifest := filepath.Join(b.TempDir(), "policies.yaml")
	require.NoError(b, os.WriteFile(manifest, []byte(strings.Join(docs, "---\n")), 0o600))
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LETHE_HOME=" + home}
	apply := exec.Command(filepath.Join(bin, "lethe"), "apply", "-f", manifest)
	apply.Env = env
	out, err := apply.CombinedOutput()
	require.NoError(b, err, "%s", out)

	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, filepath.Join(bin, "lethe"), "server", "--no-plugins", "--metrics-addr", benchPort(b))
	cmd.Env = env
	require.NoError(b, cmd.Start())
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	time.Sleep(5 * time.Second) // started, led, synced, evaluated once
	b.ResetTimer()
	c0 := cpuSeconds(b, cmd.Process.Pid)
	time.Sleep(idle)
	c1 := cpuSeconds(b, cmd.Process.Pid)
	b.StopTimer()
	b.ReportMetric(float64(n), "policies")
	b.ReportMetric((c1-c0)*60/idle.Seconds(), "cpu-s/60s")
}
