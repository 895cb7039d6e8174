package cli

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

func newPluginCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "plugin",
		Short: "List and lock the DeleteItemAction plugins in the plugin folder",
	}
	groupCmd(c)
	c.AddCommand(newPluginListCmd(a), newPluginLockCmd(a))
	return c
}

type lockView struct {
	Kind   string `json:"kind"` // always "LockEntry"
	Binary string `json:"binary"`
	SHA256 string `json:"sha256"`
	Change string `json:"change"` // new, changed, unchanged, removed
}

func newPluginLockCmd(a *app) *cobra.Command {
	var dryRun bool
	c := &cobra.Command{
		Use:   "lock",
		Short: "Pin the sha256 of every plugin binary in a lock file",
		Long: `Lock writes the lock file (--plugin-lock, default lethe-plugins.lock in the
plugin folder) with the sha256 of every plugin binary there. While the lock
file exists, Lethe refuses, before running it, any binary whose checksum
differs or that the lock file does not list, and runs a locked binary from a
sealed in-memory copy of the checked bytes. Run it again after installing or
upgrading a plugin; it shows what changed. Keep the lock file outside the
plugin folder, and pass the same --plugin-lock to every command.`,
		Example: `  lethe plugin lock --dry-run
  lethe plugin lock
  lethe plugin lock --plugin-lock /etc/lethe/plugins.lock`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "show what the lock file would pin, and write nothing")
	c.RunE = func(*cobra.Command, []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		if err := a.init(); err != nil {
			return err
		}
		if a.veleroPluginsOnly() {
			return a.lockVeleroOnly(dryRun, *out)
		}
		lockPath := a.g.lockFile()
		next, views, err := lockFolder(a.g.pluginDir, lockPath, dryRun)
		if err != nil {
			return err
		}
		// The Velero plugin folder has a lock file of its own
		// (--velero-plugin-lock, default in that folder); its changes are
		// shown in the same table.
		vlock := a.g.veleroLockFile()
		var vnext *pluginhost.Lock
		if _, err := os.Stat(a.g.veleroPluginDir); err == nil {
			var vviews []lockView
			if vnext, vviews, err = lockFolder(a.g.veleroPluginDir, vlock, dryRun); err != nil {
				return err
			}
			views = append(views, vviews...)
		}
		if structured(*out) {
			return printList(a.s.Out, *out, "LockEntry", views)
		}
		if err := a.printLockTable(views); err != nil {
			return err
		}
		if dryRun {
			fmt.Fprintf(a.s.Out, "dry run: %s not written\n", termtext.Quote(lockPath))
		} else {
			fmt.Fprintf(a.s.Out, "wrote %s: %s pinned\n", termtext.Quote(lockPath), counted(len(next.Plugins), "binary", "binaries"))
		}
		if vnext != nil {
			if dryRun {
				fmt.Fprintf(a.s.Out, "dry run: %s (Velero plugins) not written\n", termtext.Quote(vlock))
			} else {
				fmt.Fprintf(a.s.Out, "wrote %s: %d Velero plugin %s pinned\n", termtext.Quote(vlock), len(vnext.Plugins), noun(len(vnext.Plugins), "binary", "binaries"))
			}
		}
		return nil
	}
	return c
}

func newPluginListCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "list",
		Short: "Start every plugin binary, handshake, and list what each serves",
		Long: `List starts every executable in the plugin folder (--plugin-dir), asks it
which plugins it serves and what items each one selects, and prints them in
the order they run: alphanumeric order of their names.

A binary that is refused (not in the lock file, checksum mismatch, unsafe
permissions, reserved or duplicate name, invalid version) or fails to start
is reported on stderr, one line each, and the command exits non-zero; the
other plugins are still listed. Names, versions and paths that are not
plain text are shown quoted.

A selector's resource names are resolved as Velero resolves them through
discovery: plural, singular and short names ("cm", "svc", "deploy", …),
with or without the group, for Kubernetes' built-in resources. A name that
is none of them selects only the tarball folder resources/<name>/ (a custom
resource) and gets a warning on stderr.`,
		Example: `  lethe plugin list
  lethe plugin list -o json`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		h, err := a.plugins(cmd.Context())
		if err != nil {
			return err
		}
		views := []view.Plugin{}
		for _, in := range h.Plugins() {
			views = append(views, view.NewPlugin(in))
			for _, n := range in.Unresolved {
				fmt.Fprintf(a.s.Err, "warning: plugin %s selects resource %s, which is no built-in Kubernetes resource: "+
					"it selects only the items of a tarball folder resources/%s/ (a custom resource's plural name, with or without its group)\n",
					pluginhost.Quote(in.Name), pluginhost.Quote(n), pluginhost.Quote(strings.ToLower(n)))
			}
		}
		problems := h.Problems()
		for _, p := range problems {
			fmt.Fprintf(a.s.Err, "refused: %s: %s\n", termtext.Quote(p.Binary), termtext.Quote(oneLineErr(p.Err)))
		}
		var refused error
		if len(problems) > 0 {
			refused = fmt.Errorf("%d plugin binaries refused or failed to start (listed above); their plugins are not loaded", len(problems))
		}
		if structured(*out) {
			if err := printList(a.s.Out, *out, view.PluginKind, views); err != nil {
				return err
			}
			return refused
		}
		if len(views) == 0 && refused == nil {
			fmt.Fprintf(a.s.Out, "No plugins in %s. Copy plugin binaries there (see docs/plugin-authoring.md).\n", termtext.Quote(a.g.pluginDir))
			return nil
		}
		if len(views) == 0 {
			return refused
		}
		t := newTable(a.s.Out, "NAME", "VERSION", "PROTOCOL", "SELECTOR", "CHECKSUM", "BINARY")
		for _, v := range views {
			// Everything here came from a plugin or the file system:
			// quoted when it is not plain text, so an escape sequence can
			// not hide or rewrite a line.
			t.row(termtext.Quote(v.Name), termtext.Quote(v.Version), v.Protocol+"/"+fmt.Sprint(v.ProtocolVersion), termtext.Quote(v.Selector), v.ChecksumStatus+" "+shortDigest(v.Checksum), termtext.Quote(v.Binary))
		}
		if err := t.flush(); err != nil {
			return err
		}
		return refused
	}
	return c
}

// oneLineErr renders a (possibly joined) error on one line.
func oneLineErr(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// lockFolder pins (or, with dryRun, computes) the binaries of dir in the
// lock file lockPath, and says of each what changed against the lock file
// as it was: new, unchanged, changed or removed.
func lockFolder(dir, lockPath string, dryRun bool) (*pluginhost.Lock, []lockView, error) {
	old, err := pluginhost.ReadLock(lockPath)
	if err != nil {
		return nil, nil, err
	}
	var next *pluginhost.Lock
	if dryRun {
		next, err = pluginhost.ComputeLock(dir, lockPath)
	} else {
		next, err = pluginhost.WriteLock(dir, lockPath)
	}
	if err != nil {
		return nil, nil, err
	}
	views := []lockView{}
	for _, name := range slices.Sorted(maps.Keys(next.Plugins)) {
		v := lockView{Kind: "LockEntry", Binary: name, SHA256: next.Plugins[name].SHA256, Change: "new"}
		if old != nil {
			if e, ok := old.Plugins[name]; ok {
				v.Change = "unchanged"
				if e.SHA256 != v.SHA256 {
					v.Change = "changed"
				}
			}
		}
		views = append(views, v)
	}
	if old != nil {
		for _, name := range slices.Sorted(maps.Keys(old.Plugins)) {
			if _, ok := next.Plugins[name]; !ok {
				views = append(views, lockView{Kind: "LockEntry", Binary: name, SHA256: old.Plugins[name].SHA256, Change: "removed"})
			}
		}
	}
	return next, views, nil
}

func (a *app) printLockTable(views []lockView) error {
	t := newTable(a.s.Out, "BINARY", "SHA256", "CHANGE")
	for _, v := range views {
		t.row(termtext.Quote(v.Binary), v.SHA256, v.Change)
	}
	return t.flush()
}
