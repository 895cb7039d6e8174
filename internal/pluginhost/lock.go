package pluginhost

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// LockFileName is the name of the lock file inside the plugin directory,
// where it lives unless Config.LockFile puts it elsewhere.
const LockFileName = "lethe-plugins.lock"

// Lock pins the sha256 of each plugin binary. While a lock file is present,
// the host refuses, before running it, any binary whose checksum differs or
// that the lock does not list.
//
// The host runs a locked binary from a sealed in-memory copy whose
// checksum it verified, so the bytes that run are the bytes that were
// checked. The lock covers the binary's file only: not the interpreter of
// a script (#!), not what a script or binary loads at run time (shared
// libraries, imports, configuration). Ship a plugin as one self-contained
// binary to have all of it pinned.
type Lock struct {
	// Version is the lock file format, 1.
	Version int `json:"version"`
	// Plugins maps a binary's file name (relative to the plugin directory)
	// to its sha256, in hex.
	Plugins map[string]LockEntry `json:"plugins"`
}

// LockEntry is one pinned binary.
type LockEntry struct {
	SHA256 string `json:"sha256"`
}

// DefaultLockFile returns the lock file of a plugin directory when none is
// configured: dir/lethe-plugins.lock.
func DefaultLockFile(dir string) string { return filepath.Join(dir, LockFileName) }

// ReadLock reads the lock file at path. It returns (nil, nil) when the file
// does not exist. It refuses a lock file that someone other than Lethe's
// user or root could write or replace (see TrustError).
func ReadLock(path string) (*Lock, error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	resolved, err := checkTrusted("plugin lock file", path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(resolved)
	if err != nil {
		return nil, fmt.Errorf("plugin lock file: %w", err)
	}
	var l Lock
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("plugin lock file %s: %w", path, err)
	}
	if l.Version != 1 {
		return nil, fmt.Errorf("plugin lock file %s: unknown version %d (want 1)", path, l.Version)
	}
	if l.Plugins == nil {
		l.Plugins = map[string]LockEntry{}
	}
	for name, e := range l.Plugins {
		if sum, err := hex.DecodeString(e.SHA256); err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("plugin lock file %s: the sha256 of %q, %q, is not 64 hex digits", path, name, e.SHA256)
		}
	}
	return &l, nil
}

// ComputeLock returns the lock WriteLock would write, and writes nothing.
// lockFile is the lock file's path ("" for the default), which is never
// pinned itself.
func ComputeLock(dir, lockFile string) (*Lock, error) {
	bins, refused, err := listBinaries(dir, lockFile)
	if err != nil {
		return nil, err
	}
	if len(refused) > 0 {
		errs := make([]error, len(refused))
		for i, p := range refused {
			errs[i] = p.Err
		}
		return nil, errors.Join(errs...)
	}
	l := &Lock{Version: 1, Plugins: map[string]LockEntry{}}
	for _, b := range bins {
		sum, err := fileSHA256(b.exe)
		if err != nil {
			return nil, err
		}
		l.Plugins[b.name()] = LockEntry{SHA256: sum}
	}
	return l, nil
}

// WriteLock pins every plugin binary of dir: it writes lockFile ("" for
// dir/lethe-plugins.lock) with the sha256 of each executable, replacing
// any previous lock file. It refuses, like the host does, binaries and
// folders that someone other than Lethe's user or root could change, and
// a lock file folder of that kind.
func WriteLock(dir, lockFile string) (*Lock, error) {
	if lockFile == "" {
		lockFile = DefaultLockFile(dir)
	}
	l, err := ComputeLock(dir, lockFile)
	if err != nil {
		return nil, err
	}
	folder, err := checkTrusted("plugin lock file folder", filepath.Dir(lockFile))
	if err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	tmp, err := os.CreateTemp(folder, "."+filepath.Base(lockFile)+".*")
	if err != nil {
		return nil, fmt.Errorf("write plugin lock file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write plugin lock file: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(folder, filepath.Base(lockFile))); err != nil {
		return nil, fmt.Errorf("write plugin lock file: %w", err)
	}
	return l, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("checksum %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// binEntry is one executable of the plugin folder.
type binEntry struct {
	path string // in the plugin folder, absolute
	exe  string // path with every symlink resolved: what runs
}

// name is the binary's file name: how the lock file and the operator's
// configuration name it.
func (b binEntry) name() string { return filepath.Base(b.path) }

// listBinaries returns the executables of dir, sorted. It skips
// directories, hidden files, non-executable files and the lock file. It
// refuses, naming the path and the problem, a plugin folder or binary
// that someone other than Lethe's user or root could change (see
// checkTrusted); a symlink is followed and its target checked the same
// way.
//
// It fails on a missing, unreadable or untrusted folder and on a regular
// file that is not executable; a binary refused on its own (see
// checkTrusted) is returned in refused, and the others still load.
func listBinaries(dir, lockFile string) (out []binEntry, refused []Problem, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, err
	}
	st, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, &PluginDirError{Dir: abs, Err: ErrPluginDirMissing}
	}
	if err != nil {
		return nil, nil, &PluginDirError{Dir: abs, Err: unwrapPath(err)}
	}
	if !st.IsDir() {
		return nil, nil, &PluginDirError{Dir: abs, Err: errors.New("not a directory")}
	}
	real, err := checkTrusted("plugin folder", abs)
	if err != nil {
		return nil, nil, err
	}
	skip := ""
	if lockFile != "" {
		if skip, err = filepath.Abs(lockFile); err != nil {
			return nil, nil, err
		}
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return nil, nil, &PluginDirError{Dir: abs, Err: unwrapPath(err)}
	}
	var errs []error
	var notExec *NotExecutableError
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(abs, name)
		if name == LockFileName || path == skip || name[0] == '.' {
			continue
		}
		fi, err := os.Stat(filepath.Join(real, name)) // follows symlinks: the target is what runs
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: %w", Quote(path), unwrapPath(err)))
			continue
		}
		if fi.IsDir() {
			continue
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			if notExec == nil {
				notExec = &NotExecutableError{Path: path}
			} else {
				notExec.More = append(notExec.More, path)
			}
			continue
		}
		exe, err := checkTrusted("plugin binary", filepath.Join(real, name))
		if err != nil {
			if te, ok := err.(*TrustError); ok {
				te.Path = path
			}
			refused = append(refused, Problem{Binary: path, Err: err})
			continue
		}
		out = append(out, binEntry{path: path, exe: exe})
	}
	if notExec != nil {
		return nil, nil, notExec
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	slices.SortFunc(out, func(a, b binEntry) int { return strings.Compare(a.path, b.path) })
	return out, refused, nil
}

// unwrapPath drops the *fs.PathError around err, whose path the caller
// already names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
