package cli

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/termtext"
)

// veleroPluginsOnly reports a fresh home that has a Velero plugin folder
// but no Lethe plugin folder (the default one, not created yet): a Velero
// user's first step. `plugin lock` then pins the Velero plugins only.
func (a *app) veleroPluginsOnly() bool {
	if !a.g.pluginDirDefault {
		return false // a folder given must exist: the lock reports it
	}
	if _, err := os.Stat(a.g.pluginDir); !errors.Is(err, os.ErrNotExist) {
		return false
	}
	fi, err := os.Stat(a.g.veleroPluginDir)
	return err == nil && fi.IsDir()
}

// lockVeleroOnly writes (or, with dryRun, shows) the Velero plugins' lock
// file (--velero-plugin-lock, default in their folder).
func (a *app) lockVeleroOnly(dryRun bool, out string) error {
	vlock := a.g.veleroLockFile()
	old, err := pluginhost.ReadLock(vlock)
	if err != nil {
		return err
	}
	var next *pluginhost.Lock
	if dryRun {
		next, err = pluginhost.ComputeLock(a.g.veleroPluginDir, vlock)
	} else {
		next, err = pluginhost.WriteLock(a.g.veleroPluginDir, vlock)
	}
	if err != nil {
		return err
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
	if out != "table" {
		return printStructured(a.s.Out, out, views)
	}
	t := newTable(a.s.Out, "BINARY", "SHA256", "CHANGE")
	for _, v := range views {
		t.row(termtext.Quote(v.Binary), v.SHA256, v.Change)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if dryRun {
		fmt.Fprintf(a.s.Out, "dry run: %s (Velero plugins) not written\n", termtext.Quote(vlock))
	} else {
		fmt.Fprintf(a.s.Out, "wrote %s: %d Velero plugin binaries pinned (no Lethe plugin folder %s yet)\n", termtext.Quote(vlock), len(next.Plugins), termtext.Quote(a.g.pluginDir))
	}
	return nil
}
