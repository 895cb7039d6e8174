package deletion_test

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
)

// TestTakeoversAreReported: OnTakeover hears of a claim that took over
// the lease of a dead local process, and of one another holder let
// expire; not of a claim of a free deletion.
func TestTakeoversAreReported(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var from []string
	e.del.OnTakeover(func(w *catalog.WorkItem) {
		mu.Lock()
		defer mu.Unlock()
		from = append(from, w.TakenOverFrom)
	})
	taken := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), from...)
	}

	e.addBackup("free", items(3), archivetest.Options{}, nil)
	_, err := e.del.Delete(e.ctx, "free", deletion.Options{})
	require.NoError(t, err)
	require.Empty(t, taken(), "a free deletion is no takeover")

	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	host, _ := os.Hostname()
	dead := fmt.Sprintf("%s pid %d ns %s", host, cmd.Process.Pid, nsOfThisProcess(t)) // exited
	e.addBackup("nightly", items(3), archivetest.Options{}, nil)
	e.leaseHeldBy("nightly", dead)
	rep, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Equal(t, []string{dead}, taken())

	// A replica elsewhere claimed and stalled; its lease ran out.
	e.addBackup("weekly", items(3), archivetest.Options{}, nil)
	_, err = e.del.Delete(e.ctx, "weekly", deletion.Options{Async: true})
	require.NoError(t, err)
	r, err := e.store.Get(e.ctx, backup.Key("weekly"))
	require.NoError(t, err)
	_, err = e.store.ClaimKey(e.ctx, deletion.Queue, r.UID, "elsewhere.example pid 1", time.Minute)
	require.NoError(t, err)
	e.now = e.now.Add(2 * time.Minute) // its lease runs out
	rep, err = e.del.Delete(e.ctx, "weekly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Equal(t, []string{dead, "elsewhere.example pid 1"}, taken())
}
