package pluginhost

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// TrustError is a path Lethe refuses to trust: the plugin folder, a plugin
// binary or the lock file, or a folder on the way to one of them, is
// writable or replaceable by someone other than Lethe's user and root.
type TrustError struct {
	// What is being checked: "plugin folder", "plugin binary" or "plugin
	// lock file".
	What string
	// Path is the path asked for.
	Path string
	// Culprit is the path at fault: Path itself, one of its folders, or
	// where a symlink on the way leads.
	Culprit string
	// Problem says what is wrong with Culprit.
	Problem string
	// Hint is the command that fixes it.
	Hint string
}

func (e *TrustError) Error() string {
	msg := e.What + " " + e.Path + ": " + e.Culprit + " " + e.Problem + "; refusing to trust it"
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}

// maxSymlinks bounds the symlinks followed while resolving one path.
const maxSymlinks = 40

// checkTrusted resolves path one component at a time, following
// symlinks, and checks everything it passes through with sshd's rule
// (StrictModes): each folder, and the file or folder it ends at, must be
// owned by Lethe's user or root and must not be writable by group or
// others; a symlink must be owned by Lethe's user or root. One exception: a folder before the last one may be writable by
// others when it has the sticky bit, as /tmp has: there nobody but the
// owner of an entry (and the folder's owner, Lethe's user or root) may
// rename or remove it. It returns the resolved path.
func checkTrusted(what, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, path, err)
	}
	uid := os.Geteuid()
	judge := func(p string, fi fs.FileInfo, last bool) error {
		fail := func(problem, hint string) error {
			return &TrustError{What: what, Path: abs, Culprit: p, Problem: problem, Hint: hint}
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid && st.Uid != 0 {
			return fail(fmt.Sprintf("is owned by uid %d, not by Lethe's user (uid %d) or root", st.Uid, uid),
				fmt.Sprintf("chown %d %s", uid, p))
		}
		perm := fi.Mode().Perm()
		if perm&0o022 == 0 || (!last && fi.IsDir() && fi.Mode()&fs.ModeSticky != 0) {
			return nil
		}
		who := "group-writable"
		if perm&0o002 != 0 {
			who = "world-writable"
		}
		return fail(fmt.Sprintf("is %s (mode %s)", who, fi.Mode()), "chmod go-w "+p)
	}
	fi, err := os.Lstat("/")
	if err != nil {
		return "", err
	}
	if err := judge("/", fi, abs == "/"); err != nil {
		return "", err
	}
	resolved := "/"
	rest := splitPath(abs)
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		if c == ".." {
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", what, abs, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			// A symlink's own mode means nothing, but its owner does: in a
			// sticky folder such as /tmp anyone may plant one.
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid && st.Uid != 0 {
				return "", &TrustError{What: what, Path: abs, Culprit: next,
					Problem: fmt.Sprintf("is a symbolic link owned by uid %d, not by Lethe's user (uid %d) or root", st.Uid, uid),
					Hint:    "replace it with one of your own"}
			}
			if links++; links > maxSymlinks {
				return "", fmt.Errorf("%s %s: too many levels of symbolic links", what, abs)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", fmt.Errorf("%s %s: %w", what, abs, err)
			}
			if filepath.IsAbs(target) {
				resolved = "/"
			}
			rest = append(splitPath(target), rest...)
			continue
		}
		if err := judge(next, fi, len(rest) == 0); err != nil {
			return "", err
		}
		resolved = next
	}
	return resolved, nil
}

// splitPath splits p into its components, without empty ones and ".".
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// CheckTrusted checks path with sshd's rule, as the plugin folder is
// checked (see checkTrusted), for another file whose contents decide what
// Lethe runs, such as the config file: what names the plugins' environment
// must be no easier to change than the plugins themselves. what names the
// file in the error, a *TrustError.
func CheckTrusted(what, path string) error {
	_, err := checkTrusted(what, path)
	return err
}
