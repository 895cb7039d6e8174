package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// The catalog holds the audit trail and every resource's spec: only its
// owner may read it. SQLite creates the database file 0644 less the umask,
// and gives its -wal and -shm files the database file's mode, so the file
// is created here first, 0600 whatever the umask, and the other two follow.
const fileMode fs.FileMode = 0o600

// prepareFile creates the database file at path owner-only when it does
// not exist yet. For one that exists, it warns, in one line, when group
// or others can access it (or its -wal or -shm file), and leaves the
// mode alone: the operator may have chosen it.
func prepareFile(path string, log hclog.Logger) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileMode)
	if err == nil {
		// O_CREATE's mode passes through the umask, which can only
		// narrow it; set it explicitly all the same.
		err = f.Chmod(fileMode)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("catalog: sqlite: creating %s: %w", path, err)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("catalog: sqlite: creating %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue // -wal and -shm exist only while the catalog is open
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			log.Warn(fmt.Sprintf("the catalog file %s can be read or written by group or others (mode %04o); it holds the audit trail: chmod 600 it", p, perm))
		}
	}
	return nil
}
