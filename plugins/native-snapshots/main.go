// Command native-snapshots is the lethe.io/native-snapshots plugin: it
// deletes the native volume snapshots a Velero backup took through its
// VolumeSnapshotter plugins (the items of kind lethe.io/v1
// NativeVolumeSnapshot that Lethe makes of the backup's
// <name>-volumesnapshots.json.gz; see docs/plugin-authoring.md).
//
// It is an example, and its cloud is a FAKE one: a local directory in
// which each snapshot is a file named by its providerSnapshotID. A real
// plugin calls the cloud's API instead (EC2 DeleteSnapshot, say) with the
// credentials and region of the item's spec.location; everything else
// (which items it asks for, the ownership check, the outcomes) is what a
// real one does.
//
// Configuration, from the environment the operator sets for the binary,
// e.g. --plugin-env native-snapshots:LETHE_FAKE_CLOUD_DIR=/srv/fake-cloud:
//
//   - LETHE_FAKE_CLOUD_DIR: the fake cloud. Required: without it every
//     item fails, so no backup is purged while its snapshots might remain.
//
// For each item: a snapshot whose spec.backupName names another backup is
// Skipped (it is that backup's); one without a providerSnapshotID (its
// phase is Failed or New: it was never taken) is Skipped; an ID that is
// not a plain file name fails; a "<id>.lock" file beside it means Blocked,
// retried after a minute (a snapshot in use, say by a volume being
// created from it); a missing snapshot is done (deletion is idempotent);
// otherwise the file is removed. Each call the fake cloud answers is
// appended to its log, <dir>/api-calls.log: "DeleteSnapshot <id> <location>
// <result>", result being deleted, not-found or in-use.
package main

import (
	"os"

	"github.com/lethehq/lethe/pkg/plugin"
)

// Version is the plugin's version.
const Version = "v1.0.0"

func main() {
	plugin.Serve(&plugin.Plugin{
		Name:           "native-snapshots",
		Version:        Version,
		Action:         &action{dir: os.Getenv("LETHE_FAKE_CLOUD_DIR")},
		MaxConcurrency: 8,
	})
}
