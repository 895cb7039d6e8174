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
		files, err := os.ReadDir(path)
		if err != nil {
			continue
		}
		onlySockets := true
		for _, f := range files {
			if f.Type()&os.ModeSocket == 0 {
				onlySockets = false
			}
		}
		if onlySockets && os.RemoveAll(path) == nil {
			log.Debug("removed the socket directory of a dead host", "dir", path)
		}
	}
}

func ownedByMe(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
