package manifest_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/manifest"
)

// TestNamedPipeIsRefusedNotWaitedFor: a FIFO named x.yaml, given alone or
// found in a folder, is refused with one line at once: opening it for
// reading used to wait for a writer for ever.
func TestNamedPipeIsRefusedNotWaitedFor(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "x.yaml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("kind: Node\nmetadata: {name: a}\n"), 0o600))
	for _, path := range []string{fifo, dir} {
		done := make(chan error, 1)
		go func() {
			_, err := manifest.Load(path, nil, manifest.DefaultLimits)
			done <- err
		}()
		select {
		case err := <-done:
			require.EqualError(t, err, fifo+": not a regular file; refusing to read it")
		case <-time.After(5 * time.Second):
			// Unblock the reader before failing.
			if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				_ = w.Close()
			}
			t.Fatalf("%s: still reading a FIFO after 5s", path)
		}
	}
}
