// Command snapshot-files is the lethe.io/snapshot-files plugin. It stands
// for a real snapshot plugin, with a directory of files as the snapshot
// store: for each item of one resource, it deletes the file that a field of
// the item names.
//
// Configuration, from the environment (the plugin inherits the host's):
//
//   - LETHE_SNAPSHOT_DIR: the snapshot store directory. Required: without
//     it every item fails, so no backup is purged while its snapshots
//     might remain.
//   - LETHE_SNAPSHOT_RESOURCE: the group-qualified resource whose items name
//     a snapshot (default "volumesnapshotcontents.snapshot.storage.k8s.io").
//   - LETHE_SNAPSHOT_FIELD: the dotted JSON path of the snapshot's file name
//     in the item (default "status.snapshotHandle").
//
// For each item: a missing field means Skipped; a name that is not a plain
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
