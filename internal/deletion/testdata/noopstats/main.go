// Command noopstats is the noop example plugin (plugins/noop) with its
// process's allocation counters written down, for the benchmark through
// the lethe binary: when Serve returns it writes runtime.MemStats Mallocs
// and TotalAlloc, and how many items it executed, to ".NAME.memstats"
// beside its binary NAME. When ".NAME.profile" exists there at start, it
// also writes a CPU profile to ".NAME.cpu.pprof" and an allocation profile
// to ".NAME.allocs.pprof". (A plugin gets a minimal environment, so the
// paths come from its own; the host ignores files whose names start with
// a dot.)
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync/atomic"

	"github.com/lethehq/lethe/pkg/plugin"
)

var items atomic.Int64

func main() {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exe := filepath.Join(filepath.Dir(self), "."+filepath.Base(self))
	profile := false
	if _, err := os.Stat(exe + ".profile"); err == nil {
		profile = true
		runtime.MemProfileRate = 64 << 10
		if f, err := os.Create(exe + ".cpu.pprof"); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer f.Close()
		}
	}
	plugin.Serve(&plugin.Plugin{Name: "noop", Version: "v1.0.0", Action: action{}, MaxConcurrency: 1024})
	if profile {
		pprof.StopCPUProfile()
		if f, err := os.Create(exe + ".allocs.pprof"); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	_ = os.WriteFile(exe+".memstats", fmt.Appendf(nil, "%d %d %d\n", ms.Mallocs, ms.TotalAlloc, items.Load()), 0o600)
}

type action struct{}

func (action) AppliesTo(context.Context) (plugin.ResourceSelector, error) {
	return plugin.ResourceSelector{}, nil
}

func (action) Execute(context.Context, *plugin.DeleteItemActionInput) error {
	items.Add(1)
	return nil
}
