package pluginhost

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lethehq/lethe/internal/termtext"
)

// Problem is a plugin binary that discovery refused or could not start; its plugins are not loaded.
type Problem struct {
	Binary string   // path of the binary
	Names  []string // plugins it serves, when known (e.g. both binaries of a duplicate name)
	Err    error
}

// Problems returns the binaries discovery refused or could not start, sorted by path.
func (h *Host) Problems() []Problem {
	out := slices.Clone(h.problems)
	slices.SortFunc(out, func(a, b Problem) int { return strings.Compare(a.Binary, b.Binary) })
	return out
}

// ErrPluginDirMissing is wrapped by the error New returns when the plugin
// directory does not exist.
var ErrPluginDirMissing = errors.New("plugin directory does not exist")

// PluginDirError is a plugin directory that cannot be used: missing,
// unreadable, not a directory, or unsafe. New fails with it: no plugin
// runs. It wraps ErrPluginDirMissing when the directory does not exist.
type PluginDirError struct {
	Dir string
	Err error
}

func (e *PluginDirError) Error() string {
	if errors.Is(e.Err, ErrPluginDirMissing) {
		return fmt.Sprintf("plugin directory %s does not exist", Quote(e.Dir))
	}
	return fmt.Sprintf("plugin directory %s: %v", Quote(e.Dir), e.Err)
}

func (e *PluginDirError) Unwrap() error { return e.Err }

// NotExecutableError is a regular file of the plugin directory without an
// execute bit. New fails with it rather than skip the file: a plugin that
// lost its execute bit must not be silently left out of a deletion.
type NotExecutableError struct {
	Path string
	More []string // other such files, when there are several
}

func (e *NotExecutableError) Error() string {
	return fmt.Sprintf("%s%s in the plugin directory is not executable: every file there must be a plugin binary (chmod +x it, or move it out; names starting with '.' are ignored)", Quote(e.Path), andMore(e.More))
}

// andMore renders " (and N more: a, b)" for the rest of a list.
func andMore(more []string) string {
	if len(more) == 0 {
		return ""
	}
	q := make([]string, len(more))
	for i, m := range more {
		q[i] = Quote(m)
	}
	return fmt.Sprintf(" (and %d more: %s)", len(more), strings.Join(q, ", "))
}

// LockedBinaryMissingError is a binary that the lock file pins but that is
// not in the plugin directory. New fails with it: a plugin the operator
// pinned is expected to run.
type LockedBinaryMissingError struct {
	Name string   // file name, as in the lock file
	More []string // other absent binaries, when there are several
	Dir  string
	Lock string // the lock file
}

func (e *LockedBinaryMissingError) Error() string {
	return fmt.Sprintf("plugin binary %s%s is pinned in the lock file %s but absent from %s (reinstall it, or run `lethe plugin lock` to unpin it)", Quote(e.Name), andMore(e.More), Quote(e.Lock), Quote(e.Dir))
}

// UnpinnedError is a binary of the plugin directory that the lock file
// does not list: it is refused before it runs, so it receives no item. A
// binary added to the folder after `lethe plugin lock` is one.
type UnpinnedError struct {
	Binary string // path of the binary
	Lock   string // the lock file
	Velero bool   // a Velero plugin binary (its own lock file)
}

func (e *UnpinnedError) Error() string {
	what := ""
	if e.Velero {
		what = " (Velero)"
	}
	return fmt.Sprintf("plugin binary %s%s is not in the lock file %s; refusing to run it (run `lethe plugin lock` to trust it)", Quote(e.Binary), what, Quote(e.Lock))
}

// Quote renders a name, a version or a path that came from a plugin or
// from the file system for display: it is termtext.Quote, the one quoting
// rule of every text output.
func Quote(s string) string { return termtext.Quote(s) }
