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
)

// LockFileName is the name of the lock file inside the plugin directory.
const LockFileName = "lethe-plugins.lock"

// Lock pins the sha256 of each plugin binary. While a lock file is present,
// the host refuses, before running it, any binary whose checksum differs or
// that the lock does not list.
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

// ReadLock reads the lock file at path. It returns (nil, nil) when the file
// does not exist.
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
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
	return &l, nil
}

// ComputeLock returns the lock WriteLock would write, and writes nothing.
func ComputeLock(dir string) (*Lock, error) {
	bins, err := listBinaries(dir, LockFileName)
	if err != nil {
		return nil, err
	}
	l := &Lock{Version: 1, Plugins: map[string]LockEntry{}}
	for _, b := range bins {
		sum, err := fileSHA256(b)
		if err != nil {
			return nil, err
		}
		l.Plugins[filepath.Base(b)] = LockEntry{SHA256: sum}
	}
	return l, nil
}

// WriteLock pins every plugin binary of dir: it writes dir/lethe-plugins.lock
// with the sha256 of each executable, replacing any previous lock file. It
// refuses world-writable files and directories, like the host does.
func WriteLock(dir string) (*Lock, error) {
	l, err := ComputeLock(dir)
	if err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	tmp, err := os.CreateTemp(dir, "."+LockFileName+".*")
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
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, LockFileName)); err != nil {
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

// listBinaries returns the absolute paths of the executables of dir, sorted.
// It skips directories, hidden files and the lock file, and refuses a
// world-writable directory or binary.
func listBinaries(dir, lockName string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("plugin directory %s is not a directory", abs)
	}
	if st.Mode().Perm()&0o002 != 0 {
		return nil, fmt.Errorf("plugin directory %s is world-writable (mode %s); refusing to run plugins from it: chmod o-w %s", abs, st.Mode().Perm(), abs)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	var out []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if name == lockName || name[0] == '.' {
			continue
		}
		path := filepath.Join(abs, name)
		fi, err := os.Stat(path) // follows symlinks: the target is what runs
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: %w", path, err))
			continue
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		if fi.Mode().Perm()&0o002 != 0 {
			errs = append(errs, fmt.Errorf("plugin binary %s is world-writable (mode %s); refusing to run it: chmod o-w %s", path, fi.Mode().Perm(), path))
			continue
		}
		out = append(out, path)
	}
	slices.Sort(out)
	return out, errors.Join(errs...)
}
