package deletion_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
)

// TestACheckpointIsWrittenEveryCheckpointEverySettledItems pins the
// checkpoint's contract (Config.CheckpointEvery): with a long interval, the
// progress a crash resumes from is written after every CheckpointEvery
// settled items, not later (more redone after a crash, DESIGN §7.2) and
// not at every item (a write per item).
func TestACheckpointIsWrittenEveryCheckpointEverySettledItems(t *testing.T) {
	e := newEnv(t)
	const name, n, every = "nightly", 150, 50
	e.addBackup(name, items(n), archivetest.Options{}, nil)
	ie := e.deleter("checkpoints", deletion.TestHooks{}, func(c *deletion.Config) {
		c.CheckpointEvery, c.CheckpointInterval = every, time.Hour
		// One item at a time: each settles alone, in order.
		c.ReorderWindow = 1
	})
	var mu sync.Mutex
	var saved []int64
	ie.store.afterCheckpoint = func(c catalog.Checkpoint) {
		mu.Lock()
		defer mu.Unlock()
		saved = append(saved, c.Progress.Watermark)
	}
	rep, err := ie.del.Delete(e.ctx, name, deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)

	mu.Lock()
	defer mu.Unlock()
	require.EqualValues(t, n, rep.TotalItems)
	require.Equal(t, []int64{every, 2 * every, 3 * every, n}, saved, "the watermark of each checkpoint written, the last one the final save")
}
