package cli

import (
	"errors"
	"fmt"
	"os"

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
	next, views, err := lockFolder(a.g.veleroPluginDir, vlock, dryRun)
	if err != nil {
		return err
	}
	if structured(out) {
		return printList(a.s.Out, out, "LockEntry", views)
	}
	if err := a.printLockTable(views); err != nil {
		return err
	}
	if dryRun {
		fmt.Fprintf(a.s.Out, "dry run: %s (Velero plugins) not written\n", termtext.Quote(vlock))
	} else {
		fmt.Fprintf(a.s.Out, "wrote %s: %d Velero plugin %s pinned (no Lethe plugin folder %s yet)\n", termtext.Quote(vlock), len(next.Plugins), noun(len(next.Plugins), "binary", "binaries"), termtext.Quote(a.g.pluginDir))
	}
	return nil
}
