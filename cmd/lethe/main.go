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
// limit, the heap overshoots several times the live data (a peak RSS of
// 130 to 190 MiB at 200k items). 80 MiB keeps a deletion's resident memory
// flat at about 120 MiB whatever the backup's size, under the 150 MiB
// budget, while the collector runs rarely enough not to cost throughput
// (48 MiB cost a third more CPU per item); see the README's benchmarks.
const memoryLimit = 80 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	os.Exit(cli.Main(os.Args[1:]))
}
