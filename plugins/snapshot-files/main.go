// Command snapshot-files is the lethe.io/snapshot-files plugin. It stands
// for a real snapshot plugin, with a directory of files as the snapshot
// store: for each item of one resource, it deletes the file that a field of
// the item names.
//
// Configuration, from the environment. A plugin gets only a minimal part of
// Lethe's environment (PATH, HOME, LANG, TZ, TMPDIR, the log level); the
// operator configures these for it, e.g.
//
//	lethe server --plugin-env snapshot-files:LETHE_SNAPSHOT_DIR=/srv/snapshots
//
// or LETHE_PLUGIN_ENV="snapshot-files:LETHE_SNAPSHOT_DIR=/srv/snapshots":
//
//   - LETHE_SNAPSHOT_DIR: the snapshot store directory. Required: without
//     it every item fails, so no backup is purged while its snapshots
//     might remain.
//   - LETHE_SNAPSHOT_RESOURCE: the group-qualified resource whose items name
//     a snapshot (default "volumesnapshotcontents.snapshot.storage.k8s.io").
//   - LETHE_SNAPSHOT_FIELD: the dotted JSON path of the snapshot's file name
//     in the item (default "status.snapshotHandle").
//   - LETHE_SNAPSHOT_OWNER_LABEL: the label naming the backup an item
//     belongs to (default "velero.io/backup-name").
//
// For each item: an item whose owner label names another backup than the
// one being deleted is Skipped, and its snapshot left alone (it belongs to
// that backup); a missing field means Skipped; a name that is not a plain
// local path (absolute, "..", or escaping the directory) fails; a
// "<file>.lock" beside the file means Blocked, retried after a minute; a
// missing file means done (deletion is idempotent); otherwise the file is
// removed.
package main

import (
	"os"

	"github.com/lethehq/lethe/pkg/plugin"
)

// Version is the plugin's version.
const Version = "v1.0.0"

func main() {
	plugin.Serve(&plugin.Plugin{
		Name:           "snapshot-files",
		Version:        Version,
		Action:         newAction(os.Getenv),
		MaxConcurrency: 16,
	})
}
