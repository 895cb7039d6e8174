package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// BenchmarkFleetThroughput measures deletion throughput through 1, 2 and 3
// `lethe server` processes on one PostgreSQL database: 20 backups of 20k
// items each (LETHE_BENCH_FLEET_BACKUPS, LETHE_BENCH_FLEET_ITEMS), queued
// with `backup delete --async` before the replicas start, one noop plugin,
// 2 workers per replica. The clock runs from the replicas' start to the
// last purge. It reports items/s.
func BenchmarkFleetThroughput(b *testing.B) {
	admin := os.Getenv("LETHE_TEST_POSTGRES_URL")
	if admin == "" {
		b.Skip("set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	}
	backups, items := envInt("LETHE_BENCH_FLEET_BACKUPS", 20), envInt("LETHE_BENCH_FLEET_ITEMS", 20000)
	dir := b.TempDir()
	tarball := filepath.Join(dir, "t.tar.gz")
	f, err := os.Create(tarball)
	require.NoError(b, err)
	require.NoError(b, archivetest.WriteN(f, items, 1024))
	require.NoError(b, f.Close())
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				h := newBenchHome(b, admin)
				for i := range backups {
					name := fmt.Sprintf("bench-%02d", i)
					h.ok("backup", "create", name, "--from", tarball)
					h.ok("backup", "delete", name, "--async", "--yes")
				}
				h.ok("plugin", "lock") // lethe server runs pinned plugins only
				st, err := drivers.Open(context.Background(), h.store, &catalog.Config{})
				require.NoError(b, err)
				b.StartTimer()
				start := time.Now()
				var procs []*exec.Cmd
				for range n {
					c := h.cmd("server", "--workers", "2", "--log-level", "warn")
					require.NoError(b, c.Start())
					procs = append(procs, c)
				}
				for i := range backups {
					for {
						if _, err := st.GetTombstone(context.Background(), catalog.Key{Kind: "Backup", Name: fmt.Sprintf("bench-%02d", i)}); err == nil {
							break
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
				elapsed := time.Since(start)
				b.StopTimer()
				for _, c := range procs {
					_ = c.Process.Signal(syscall.SIGTERM)
					_ = c.Wait()
				}
				_ = st.Close()
				b.ReportMetric(float64(backups*items)/elapsed.Seconds(), "items/s")
				b.ReportMetric(0, "ns/op")
			}
		})
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// benchHome is a Lethe home on a database of its own, for benchmarks.
type benchHome struct {
	tb    testing.TB
	home  string
	store string
}

func newBenchHome(tb testing.TB, admin string) *benchHome {
	ctx := context.Background()
	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	name := "lethe_bench_" + hex.EncodeToString(buf)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(tb, err)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(tb, err)
	require.NoError(tb, conn.Close(ctx))
	tb.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		require.NoError(tb, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(tb, err)
	})
	u, err := url.Parse(admin)
	require.NoError(tb, err)
	u.Path = "/" + name
	h := &benchHome{tb: tb, home: filepath.Join(tb.TempDir(), "home"), store: u.String()}
	require.NoError(tb, os.MkdirAll(filepath.Join(h.home, "plugins"), 0o750))
	copyFileTB(tb, filepath.Join(bin, pluginNoop), filepath.Join(h.home, "plugins", pluginNoop))
	return h
}

func (h *benchHome) cmd(args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(bin, "lethe"), args...)
	c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.home, "LETHE_HOME=" + h.home, "LETHE_STORE=" + h.store}
	return c
}

func (h *benchHome) ok(args ...string) {
	h.tb.Helper()
	out, err := h.cmd(args...).CombinedOutput()
	require.NoError(h.tb, err, "lethe %v: %s", args, out)
}

func copyFileTB(tb testing.TB, from, to string) {
	b, err := os.ReadFile(from)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(to, b, 0o750))
}
