// Command lethe deletes backups, and everything they created outside, safely.
package main

import (
	"os"
	"runtime/debug"

	"github.com/lethehq/lethe/internal/cli"
)

// memoryLimit is the Go runtime's soft memory limit unless GOMEMLIMIT says
// otherwise. Streaming a backup allocates fast but keeps little alive; with
// plugins busy on the other cores the collector falls behind and, without a
// limit, the heap overshoots several times the live data. The limit makes
// it collect sooner, keeping a deletion's memory flat and well under
// 150 MiB whatever the backup's size (see the README's benchmarks).
const memoryLimit = 48 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	os.Exit(cli.Main(os.Args[1:]))
}
