package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	warnReplaceable(path, log)
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

// warnReplaceable warns, in one line, when someone other than Lethe's
// user and root could have put the catalog at path: its folder is
// writable by group or others (in a sticky folder such as /tmp, anyone
// can create the file before Lethe does), or the file is owned by
// another user while its folder lets others write. Anyone who can replace
// the catalog decides what Lethe reads back from it.
func warnReplaceable(path string, log hclog.Logger) {
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	if err != nil {
		return
	}
	perm := di.Mode().Perm()
	if perm&0o022 == 0 {
		return
	}
	uid := os.Geteuid()
	owner := -1
	if fi, err := os.Stat(path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = int(st.Uid)
		}
	}
	switch {
	case owner != -1 && owner != uid && owner != 0:
		log.Warn(fmt.Sprintf("the catalog file %s is owned by uid %d, not by Lethe's user (uid %d) or root, and its folder %s can be written by group or others (mode %s): anyone could have put it there; keep the catalog in a folder only Lethe's user can write", path, owner, uid, dir, di.Mode()))
	case di.Mode()&fs.ModeSticky == 0:
		log.Warn(fmt.Sprintf("the catalog's folder %s can be written by group or others (mode %s): anyone could replace the catalog; chmod go-w %s", dir, di.Mode(), dir))
	}
}
