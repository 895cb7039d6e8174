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

// checkpointsOf runs the deletion of a backup of n items, one item at a
// time (each settles alone, in order), and returns the watermark of each
// checkpoint written.
func checkpointsOf(t *testing.T, n, every int, interval time.Duration) []int64 {
	t.Helper()
	e := newEnv(t)
	e.addBackup("nightly", items(n), archivetest.Options{}, nil)
	ie := e.deleter("checkpoints", deletion.TestHooks{}, func(c *deletion.Config) {
		c.CheckpointEvery, c.CheckpointInterval, c.ReorderWindow = every, interval, 1
	})
	var mu sync.Mutex
	var saved []int64
	ie.store.afterCheckpoint = func(c catalog.Checkpoint) {
		mu.Lock()
		defer mu.Unlock()
		saved = append(saved, c.Progress.Watermark)
	}
	rep, err := ie.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.EqualValues(t, n, rep.TotalItems)
	mu.Lock()
	defer mu.Unlock()
	return saved
}

// TestACheckpointIsWrittenEveryCheckpointEveryItemsOrEveryIntervalWhicheverFirst
// pins the checkpoint's contract (Config.CheckpointEvery and
// CheckpointInterval): the progress a crash resumes from (DESIGN §7.2) is
// written after every CheckpointEvery settled items, not later and not at
// every item, unless CheckpointInterval has passed since the last one,
// and once more at the end.
func TestACheckpointIsWrittenEveryCheckpointEveryItemsOrEveryIntervalWhicheverFirst(t *testing.T) {
	const n = 150
	require.Equal(t, []int64{50, 100, 150, n}, checkpointsOf(t, n, 50, time.Hour),
		"every 50 items, the last one the final save")
	each := make([]int64, 0, n+1)
	for i := range int64(n) {
		each = append(each, i+1)
	}
	require.Equal(t, append(each, n), checkpointsOf(t, n, 1_000_000, time.Nanosecond),
		"the interval has passed at every item")
}
