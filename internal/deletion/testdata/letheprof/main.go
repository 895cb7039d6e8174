// Command letheprof is cmd/lethe with profiling, for the deletion
// benchmarks: it runs the same CLI with the same soft memory limit, and
// when LETHE_BENCH_PROFILE names a path prefix it writes a CPU profile to
// PREFIX.cpu.pprof, an allocation profile to PREFIX.allocs.pprof and the
// process's allocation counters (runtime.MemStats Mallocs and TotalAlloc)
// to PREFIX.memstats. The figures of the benchmarks come from the real
// binary; this one only says where its time and allocations go.
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"

	"github.com/lethehq/lethe/internal/cli"
)

// memoryLimit is cmd/lethe's.
const memoryLimit = 80 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	prefix := os.Getenv("LETHE_BENCH_PROFILE")
	if prefix == "" {
		os.Exit(cli.Main(os.Args[1:]))
	}
	runtime.MemProfileRate = 64 << 10
	f, err := os.Create(prefix + ".cpu.pprof")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := cli.Main(os.Args[1:])
	pprof.StopCPUProfile()
	_ = f.Close()
	if f, err := os.Create(prefix + ".allocs.pprof"); err == nil {
		_ = pprof.Lookup("allocs").WriteTo(f, 0)
		_ = f.Close()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	_ = os.WriteFile(prefix+".memstats", fmt.Appendf(nil, "%d %d\n", ms.Mallocs, ms.TotalAlloc), 0o600)
	os.Exit(code)
}
