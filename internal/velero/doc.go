// Package velero holds what Lethe knows of Velero's formats, so that a
// Velero user can point Lethe at their bucket and their plugins: the
// object-store layout of a backup storage location (backups/<name>/ with
// velero-backup.json and its sibling files), the velero.io/v1 Backup
// object stored in velero-backup.json, the list of native volume
// snapshots (<name>-volumesnapshots.json.gz) turned into items for
// plugins, and the Backup JSON that Velero's DeleteItemAction plugins
// expect.
//
// These are facts read from Velero's source (pkg/persistence/
// object_store_layout.go and pkg/apis/velero/v1, v1.18); the code is
// Lethe's own and Velero's module is not a dependency. The package
// depends on nothing of Lethe's but the public pkg/plugin (the item kind
// of native volume snapshots): the registry, the deletion pipeline and
// the plugin host build on it.
package velero
