package gc_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/pluginhost"
)

// BenchCascadeEnv sets the graph of BenchmarkCascade as ROOTSxDEPENDENTS
// (default 100x100; the budget's figure is 1000x1000, 1M resources).
const BenchCascadeEnv = "LETHE_BENCH_CASCADE"

func cascadeSize(b *testing.B) (roots, deps int) {
	v := os.Getenv(BenchCascadeEnv)
	if v == "" {
		return 100, 100
	}
	r, d, ok := strings.Cut(v, "x")
	roots, err1 := strconv.Atoi(r)
	deps, err2 := strconv.Atoi(d)
	if !ok || err1 != nil || err2 != nil {
		b.Fatalf("%s=%q: use ROOTSxDEPENDENTS, e.g. 1000x1000", BenchCascadeEnv, v)
	}
	return roots, deps
}

func BenchmarkCascadeSQLite(b *testing.B) {
	benchCascade(b, func(b *testing.B) (catalog.Store, func() serverCPU) {
		st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(b.TempDir(), "c.db"), &catalog.Config{})
		require.NoError(b, err)
		b.Cleanup(func() { _ = st.Close() })
		return st, nil
	}, false)
}

func BenchmarkCascadeSQLiteNoopPlugin(b *testing.B) {
	benchCascade(b, func(b *testing.B) (catalog.Store, func() serverCPU) {
		st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(b.TempDir(), "c.db"), &catalog.Config{})
		require.NoError(b, err)
		b.Cleanup(func() { _ = st.Close() })
		return st, nil
	}, true)
}

func BenchmarkCascadePostgres(b *testing.B) { benchCascadePostgres(b, false) }

// BenchmarkCascadePostgresNoopPlugin is BenchmarkCascadePostgres with
// one no-op plugin selecting every resource.
func BenchmarkCascadePostgresNoopPlugin(b *testing.B) { benchCascadePostgres(b, true) }

func benchCascadePostgres(b *testing.B, noop bool) {
	url := os.Getenv("LETHE_TEST_POSTGRES_URL")
	if url == "" {
		b.Skip("set LETHE_TEST_POSTGRES_URL")
	}
	benchCascade(b, func(b *testing.B) (catalog.Store, func() serverCPU) {
		buf := make([]byte, 6)
		_, _ = rand.Read(buf)
		schema := "lethe_gc_bench_" + hex.EncodeToString(buf)
		b.Cleanup(func() {
			conn, err := pgx.Connect(context.Background(), url)
			require.NoError(b, err)
			defer conn.Close(context.Background())
			_, err = conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
			require.NoError(b, err)
		})
		// The store's connections carry the schema as their
		// application_name, so that the server's CPU can be told apart.
		st, err := drivers.Open(context.Background(), withAppName(url, schema), &catalog.Config{Schema: schema})
		require.NoError(b, err)
		b.Cleanup(func() { _ = st.Close() })
		return st, func() serverCPU { return backendCPU(b, url, schema) }
	}, noop)
}

// withAppName sets application_name in a postgres:// URL.
func withAppName(url, name string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "application_name=" + name
}

// serverCPU samples the CPU time (user and system, from /proc) used so far
// by the server processes of the connections named app: the PostgreSQL
// backends serving the store (the server must run on this machine). A
// connection closed in between loses its share, so compare samples taken
// while the pool is open. reaped is the CPU time of the postmaster's
// children that exited so far: parallel query workers (a few
// milliseconds each, started and gone within a query), and any other
// session's backend that exited meanwhile.
type serverCPU struct{ backends, reaped time.Duration }

func backendCPU(b *testing.B, url, app string) serverCPU {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(b, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	require.NoError(b, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(b, err)
	var out serverCPU
	for _, pid := range pids {
		if f := procStat(pid); len(f) > 12 {
			out.backends += ticks(f[11]) + ticks(f[12])
		}
	}
	var self int32
	require.NoError(b, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&self))
	if f := procStat(self); len(f) > 1 {
		if pm, err := strconv.Atoi(f[1]); err == nil {
			if f := procStat(int32(pm)); len(f) > 14 {
				out.reaped = ticks(f[13]) + ticks(f[14])
			}
		}
	}
	return out
}

// procStat returns the fields of /proc/pid/stat after the command (the
// state first), or nil.
func procStat(pid int32) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil // gone, or not on this machine
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// ticks converts a /proc/pid/stat time (clock ticks of USER_HZ, 100 per second).
func ticks(f string) time.Duration {
	n, _ := strconv.ParseInt(f, 10, 64)
	return time.Duration(n) * (time.Second / 100)
}

// benchCascade loads ROOTS roots with DEPENDENTS dependents each
// (blockOwnerDeletion; 10% also hold a reference to a database), then
// times from the Foreground delete requests of every root to the last
// purge, with the collector running from the change feed. It reports
// resources/s and the peak RSS of the process.
// With a server CPU sampler (PostgreSQL), it also reports the server's CPU time per
// resource.
func benchCascade(b *testing.B, open func(*testing.B) (catalog.Store, func() serverCPU), noop bool) {
	roots, deps := cascadeSize(b)
	total := roots * (deps + 1)
	ctx := catalog.WithActor(context.Background(), "bench")
	var elapsed, cpu time.Duration
	var scpu serverCPU
	var sample func() serverCPU
	for range b.N {
		b.StopTimer()
		var st catalog.Store
		st, sample = open(b)
		cfg := gc.Config{Store: st, NoPlugins: true}
		if noop {
			dir := b.TempDir()
			bin := filepath.Join(dir, "noop")
			require.NoError(b, deletiontest.Build(bin, "../../plugins/noop"))
			pdir := filepath.Join(dir, "plugins")
			require.NoError(b, os.MkdirAll(pdir, 0o750))
			require.NoError(b, os.Rename(bin, filepath.Join(pdir, "noop")))
			h, err := pluginhost.New(&pluginhost.Config{Dir: pdir})
			require.NoError(b, err)
			b.Cleanup(func() { _ = h.Close() })
			cfg.Plugins, cfg.NoPlugins = gc.HostPlugins(h), false
		}
		db, err := st.Create(ctx, &catalog.Resource{Kind: "Database", Namespace: "bench", Name: "orders"})
		require.NoError(b, err)
		_ = db
		var rootKeys []catalog.Key
		for r := range roots {
			root, err := st.Create(ctx, &catalog.Resource{Kind: "Schedule", Namespace: "bench", Name: fmt.Sprintf("root-%05d", r)})
			require.NoError(b, err)
			rootKeys = append(rootKeys, root.Key())
			batch := make([]*catalog.Resource, 0, deps)
			for d := range deps {
				x := &catalog.Resource{Kind: "Snapshot", Namespace: "bench", Name: fmt.Sprintf("s-%05d-%05d", r, d),
					Owners: []catalog.OwnerRef{{UID: root.UID, Kind: root.Kind, Name: root.Name, BlockOwnerDeletion: true}}}
				if d%10 == 0 {
					x.References = []catalog.Reference{{Kind: "Database", Namespace: "bench", Name: "orders", OnTargetDelete: catalog.RefAllowDangling}}
				}
				batch = append(batch, x)
			}
			_, err = st.CreateBatch(ctx, batch)
			require.NoError(b, err)
		}
		c, err := gc.New(cfg)
		require.NoError(b, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		b.StartTimer()
		var scpu0 serverCPU
		if sample != nil {
			scpu0 = sample()
		}
		start, cpu0 := time.Now(), processCPU()
		for _, k := range rootKeys {
			_, err := c.Delete(ctx, k, gc.DeleteOptions{Propagation: gc.Foreground})
			require.NoError(b, err)
		}
		// The last purge: every root gone (each goes after its dependents).
		for _, k := range rootKeys {
			for {
				if _, err := st.Get(ctx, k); errors.Is(err, catalog.ErrNotFound) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		elapsed += time.Since(start)
		cpu += processCPU() - cpu0
		b.StopTimer()
		if sample != nil {
			s := sample()
			scpu.backends += s.backends - scpu0.backends
			scpu.reaped += s.reaped - scpu0.reaped
		}
		cancel()
		require.NoError(b, <-done)
		left, err := st.List(ctx, catalog.ListOptions{Kind: "Snapshot", Limit: 1})
		require.NoError(b, err)
		require.Empty(b, left.Items, "every dependent purged")
	}
	b.ReportMetric(float64(total*b.N)/elapsed.Seconds(), "resources/s")
	b.ReportMetric(float64(peakRSS())/(1<<20), "peak-RSS-MiB")
	// The process's CPU time per resource (collector, change feed and
	// the polling above; on PostgreSQL not the server's): steadier than
	// the wall-clock rate on a shared machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(total*b.N), "cpu-µs/resource")
	if sample != nil {
		b.ReportMetric(float64(scpu.backends.Microseconds())/float64(total*b.N), "server-cpu-µs/resource")
		b.ReportMetric(float64(scpu.reaped.Microseconds())/float64(total*b.N), "server-reaped-cpu-µs/resource")
	}
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is the process's peak resident set size in bytes.
func peakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024
}
