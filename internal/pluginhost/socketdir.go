package pluginhost

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// socketDirPrefix names a host's socket directory after its process, so
// that a later host can tell the directory of a dead one.
func socketDirPrefix(pid int) string { return "lethe-" + strconv.Itoa(pid) + "-" }

// sweepSocketDirs removes the socket directories that hosts killed without
// a chance to clean up (SIGKILL, OOM) left in dir: those of this user
// whose process no longer exists and that hold nothing but sockets.
func sweepSocketDirs(dir string, log hclog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "lethe-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive, or not ours to judge
		}
		path := filepath.Join(dir, e.Name())
		if info, err := os.Lstat(path); err != nil || !ownedByMe(info) {
			continue
		}
		if onlySockets(path, 1) && os.RemoveAll(path) == nil {
			log.Debug("removed the socket directory of a dead host", "dir", path)
		}
	}
}

// onlySockets reports whether dir holds nothing but sockets, and folders
// of sockets (a plugin's own, "plugin-N"; "uid-N" of older hosts) down
// to depth more levels.
func onlySockets(dir string, depth int) bool {
	files, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, f := range files {
		switch {
		case f.Type()&os.ModeSocket != 0:
		case f.IsDir() && depth > 0 && (strings.HasPrefix(f.Name(), "plugin-") || strings.HasPrefix(f.Name(), "uid-")):
			if !onlySockets(filepath.Join(dir, f.Name()), depth-1) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func ownedByMe(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
