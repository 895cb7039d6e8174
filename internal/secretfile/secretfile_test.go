package secretfile_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/secretfile"
)

func write(t *testing.T, mode os.FileMode, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	require.NoError(t, os.Chmod(p, mode)) // past the umask
	return p
}

// TestSecretFileOpenToGroupOrOthersIsRefused: any bit for group or others
// refuses the file, as ssh refuses a private key; 0600 and 0400 are read.
func TestSecretFileOpenToGroupOrOthersIsRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o666, 0o644, 0o640, 0o604, 0o620, 0o602, 0o610, 0o601} {
		p := write(t, mode, "s3cret\n")
		_, err := secretfile.Read(p)
		require.ErrorIs(t, err, secretfile.ErrTooOpen, "mode %04o", mode)
		require.ErrorContains(t, err, "chmod 600 "+p)
		require.NotContains(t, err.Error(), "\n")
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		b, err := secretfile.Read(write(t, mode, " s3cret\n"))
		require.NoError(t, err, "mode %04o", mode)
		require.Equal(t, "s3cret", string(b))
	}
}

func TestSecretFileEmptyOrNotRegularIsRefused(t *testing.T) {
	_, err := secretfile.Read(write(t, 0o600, " \n"))
	require.ErrorContains(t, err, "is empty")
	_, err = secretfile.Read(t.TempDir())
	require.ErrorContains(t, err, "not a regular file")
	_, err = secretfile.Read(write(t, 0o600, string(make([]byte, secretfile.MaxBytes+1))))
	require.ErrorContains(t, err, "larger than")
}

// TestSecretFileThatIsAFIFOIsRefusedWithoutWaiting: a FIFO at the path
// (with the owner-only mode a secret has) is refused as not a regular
// file; opening it as a file would wait for a writer forever, and hang
// `lethe server` at its start beyond the reach of SIGTERM.
func TestSecretFileThatIsAFIFOIsRefusedWithoutWaiting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	done := make(chan error, 1)
	go func() {
		_, err := secretfile.Read(path)
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "not a regular file")
	case <-time.After(10 * time.Second):
		// Unblock the reader so that the test ends.
		if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("Read waited on the FIFO for a writer")
	}
}
