package deletion

import (
	"fmt"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/pkg/plugin"
)

// unselectedSnapshots counts the backup's native volume snapshots (the
// items after the tarball's, from ordinal first) that no installed plugin
// selects: deleting the backup settles them without any plugin, so the
// snapshots themselves stay in the cloud.
func unselectedSnapshots(infos []pluginhost.Info, first int64, snaps []velero.SnapshotItem) int64 {
	if len(snaps) == 0 {
		return 0
	}
	m := newMatcher(infos)
	var n int64
	for i := range snaps {
		if len(m.match(backup.SnapshotItem(first+int64(i), &snaps[i]))) == 0 {
			n++
		}
	}
	return n
}

// snapshotsWarning says that n native volume snapshots go to no plugin.
func snapshotsWarning(n int64, verb string) string {
	return fmt.Sprintf("%d native volume snapshot(s) %s no plugin: the backup's deletion leaves them in the cloud "+
		"(Lethe does not run Velero's VolumeSnapshotter plugins; a plugin that selects %s.%s deletes them)",
		n, verb, plugin.NativeVolumeSnapshotResource, plugin.NativeVolumeSnapshotGroup)
}
