package velero

import "strings"

// BackupsDir is the folder of a backup storage location that holds one
// folder per backup.
const BackupsDir = "backups/"

// MetadataFile is the name of the file, in a backup's folder, that holds
// the velero.io/v1 Backup object. Velero's own sync imports a backup from
// it, so it is the first file a purge removes.
const MetadataFile = "velero-backup.json"

// BackupDir is the folder of the backup named name: "backups/<name>/".
// Listing it as a prefix finds every file Velero stored for that backup,
// and nothing of a backup whose name merely starts the same way.
func BackupDir(name string) string { return BackupsDir + name + "/" }

// MetadataKey is the key of the backup's velero-backup.json.
func MetadataKey(name string) string { return BackupDir(name) + MetadataFile }

// The suffixes of the files Velero 1.18 writes beside a backup's tarball,
// each after "<name>": backups/<name>/<name><suffix>.
var siblingSuffixes = []string{
	"-logs.gz",
	"-results.gz",
	"-resource-list.json.gz",
	"-volumesnapshots.json.gz",
	"-podvolumebackups.json.gz",
	"-itemoperations.json.gz",
	"-csi-volumesnapshots.json.gz",
	"-csi-volumesnapshotcontents.json.gz",
	"-csi-volumesnapshotclasses.json.gz",
	"-volumeinfo.json.gz",
}

// SiblingKeys are the keys of every file Velero 1.18 may store for the
// backup named name besides velero-backup.json and the tarball, in the
// order of Velero's object_store_layout.go.
func SiblingKeys(name string) []string {
	out := make([]string, len(siblingSuffixes))
	for i, s := range siblingSuffixes {
		out[i] = BackupDir(name) + name + s
	}
	return out
}

// TarballKey is the key of the backup's gzip tarball, as Velero names it.
func TarballKey(name string) string { return BackupDir(name) + name + ".tar.gz" }

// VolumeSnapshotsKey is the key of the list of native volume snapshots
// (taken through VolumeSnapshotter plugins) that the backup created.
func VolumeSnapshotsKey(name string) string {
	return BackupDir(name) + name + "-volumesnapshots.json.gz"
}

// SplitKey returns the backup folder's name and the file name of a key
// under BackupsDir: "backups/a/b.gz" is ("a", "b.gz", true). Keys nested
// deeper, or not under BackupsDir, are not backup files.
func SplitKey(key string) (name, file string, ok bool) {
	rest, ok := strings.CutPrefix(key, BackupsDir)
	if !ok {
		return "", "", false
	}
	name, file, ok = strings.Cut(rest, "/")
	if !ok || name == "" || file == "" || strings.Contains(file, "/") {
		return "", "", false
	}
	return name, file, true
}
