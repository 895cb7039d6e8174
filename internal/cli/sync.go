package cli

import (
	"fmt"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/termtext"
)

func newBackupSyncCmd(a *app) *cobra.Command {
	var dryRun, pruneMissing bool
	c := &cobra.Command{
		Use:   "sync",
		Short: "Import backups that exist in storage but not in the catalog",
		Long: `Sync lists the backup folders in the backup storage (backups/<name>/, with
<name>.tar.gz or .tar.zst) and records every one the catalog does not know.
The storage may be a Velero backup storage location: from each folder's
velero-backup.json, sync records the labels, creation time, TTL and
expiration, phase, storage location and included namespaces. A tarball
without velero-backup.json is imported with a warning; a folder whose
velero-backup.json cannot be read is rejected. It never
re-imports a backup whose deletion is scheduled or running, nor one that was
purged (its tombstone remains): a deleted backup does not come back. Each
tarball is validated before it is imported; a hostile one is reported and
skipped.

Of a backup the catalog already has, sync reads velero-backup.json again
while Velero's phase is unfinished (New, InProgress, Finalizing, …) or when
the file changed, and records the new phase and the file (action
"updated"). Only a Completed, PartiallyFailed, Failed or FailedValidation
backup can be deleted. A file that cannot be read changes nothing: the phase
recorded stays, with a warning.

Sync also compares the catalog with the listing: a backup whose tarball is
no longer in its storage location gets the condition MissingFromStorage
(action "missing-from-storage", shown by get, list and describe) and stays
in the catalog; when the tarball is listed again the condition is cleared
("back-in-storage"). Only --prune-missing removes the backups that were
already missing and still are (action "pruned"; audited, and their
tombstone keeps them from being imported again). A location that cannot be
read concludes nothing: sync fails, and no backup is marked missing.

When a folder is rejected, sync still imports the others, and exits 3
(--dry-run exits 0).

Like create, sync records each imported backup's expected plugins, so it
refuses to import anything (exit 5) while a plugin binary cannot be loaded.`,
		Example: `  lethe backup sync --dry-run
  lethe backup sync -o json
  lethe backup sync --prune-missing`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be imported, and change nothing")
	c.Flags().BoolVar(&pruneMissing, "prune-missing", false, "remove from the catalog (audited) the backups already marked MissingFromStorage whose tarball is still not listed")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		opts := registry.SyncOptions{DryRun: dryRun, PruneMissing: pruneMissing}
		// On a terminal, a bar per location: folders read of the listing.
		var bar *progressbar.ProgressBar
		opts.Progress = func(done, total int) {
			if bar == nil {
				if bar = a.newBar(int64(total), "syncing", "folders", *out); bar == nil {
					return
				}
			}
			_ = bar.Set(done)
			if done == total {
				_ = bar.Finish()
				bar = nil
			}
		}
		results, serr := a.syncLocations(cmd.Context(), opts)
		if serr != nil && len(results) == 0 {
			return serr
		}
		if err := a.printSyncResults(*out, results); err != nil {
			return err
		}
		if serr != nil {
			return serr // a location that could not be read: exit 1, the others synced
		}
		if dryRun {
			return nil // as delete --dry-run: the plan says it, exit 0
		}
		return syncRejections(results)
	}
	return c
}

// syncRejections is the exit of a sync that rejected folders: the others
// were synced, and the exit code (3) says not everything was.
func syncRejections(results []registry.SyncResult) error {
	var n int
	for _, r := range results {
		if r.Action == registry.SyncRejected {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return exitCodeError{code: exitIncomplete, err: fmt.Errorf("%s rejected (see REASON); the others were synced", counted(n, "backup folder", "backup folders"))}
}

func (a *app) printSyncResults(out string, results []registry.SyncResult) error {
	if structured(out) {
		return printList(a.s.Out, out, "SyncResult", results)
	}
	if len(results) == 0 {
		fmt.Fprintf(a.s.Out, "No tarballs in %s.\n", termtext.Quote(a.blobs.URL()))
		return nil
	}
	t := newTable(a.s.Out, "NAME", "LOCATION", "ACTION", "ITEMS", "REASON")
	for _, r := range results {
		reason := r.Reason
		if r.Warning != "" && r.Action != registry.SyncRejected {
			// A rejected folder's warning ("imported without...")
			// would hide why it was rejected, and it was not imported.
			reason = strings.TrimPrefix(reason+"; warning: "+r.Warning, "; ")
		}
		t.row(termtext.Quote(r.Name), termtext.Quote(r.Location), r.Action, fmt.Sprint(r.Items), termtext.Quote(reason))
	}
	return t.flush()
}
