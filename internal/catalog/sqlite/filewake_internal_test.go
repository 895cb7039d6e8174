package sqlite

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog/internal/sqlstore"
)

// TestFileWakeWakesAgainOnceTheFileIsQuiet: a write to the watched file
// wakes the listeners at once and twice more afterwards, because a commit's
// last write to the log comes before the writer publishes it in the
// shared-memory index, and a reader woken by that write may look too early.
func TestFileWakeWakesAgainOnceTheFileIsQuiet(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "catalog.db")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	bc := sqlstore.NewBroadcast()
	var f fileWake
	require.True(t, f.start(path, bc, func(err error) { t.Error(err) }))
	t.Cleanup(func() { require.NoError(t, f.close()) })

	next := bc.C()
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fh.Write([]byte("x")) // one write: one event
	require.NoError(t, err)
	require.NoError(t, fh.Close())

	wakes := 0
	deadline := time.After(trailWake + trailWake2 + 2*time.Second)
	for done := false; !done; {
		select {
		case <-next:
			wakes++
			next = bc.C()
		case <-deadline:
			done = true
		}
	}
	require.GreaterOrEqual(t, wakes, 3, "one write must wake the listeners, then twice more once the file is quiet")
}
