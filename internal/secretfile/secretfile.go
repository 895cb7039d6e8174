// Package secretfile reads a file that holds a secret (a signing key, a
// password, a private key) the way ssh reads a private key: a file that
// its group or others may read or write is refused, with one line naming
// the file and its mode, before a byte of it is read.
//
// It knows nothing of what the secret is for; callers name their flag in
// the error they wrap.
package secretfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxBytes caps a secret file: a secret is short, and a path that names
// something else by mistake (a log, a device) must not be read whole.
const MaxBytes = 64 << 10

// ErrTooOpen is wrapped by the error for a file that group or others can
// read or write.
var ErrTooOpen = errors.New("readable or writable by group or others")

// Read returns the contents of the secret file at path, surrounding
// blanks and line breaks trimmed. It refuses (before reading) a file that
// is not a regular file, or whose mode gives group or others any access
// (chmod 600 fixes it), and a file that is empty or over MaxBytes. The
// mode is checked on the opened file, so a rename between check and read
// cannot swap it. The file is opened without blocking, so that a FIFO
// (or a device) at path is refused rather than waited on forever.
func Read(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := Check(path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes; not a secret file", path, MaxBytes)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	return b, nil
}

// Check refuses fi (the file at path) unless it is a regular file that
// only its owner can access.
func Check(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s: mode %04o is %w; run chmod 600 %s", path, perm, ErrTooOpen, path)
	}
	return nil
}
