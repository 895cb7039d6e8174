// Package velerotest generates the files Velero 1.18 stores in a backup
// storage location, for tests: a backup's folder with velero-backup.json,
// the tarball and every sibling file, and a restore's folder. Generation
// is deterministic, so that the committed fixture bucket
// (internal/velero/testdata/bucket-1.18, written by
// `go run ./internal/velero/testdata/genbucket`) can be checked against it.
package velerotest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc64"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/velero"
)

// Created is the creation time of the generated backups.
var Created = time.Date(2026, 4, 12, 3, 0, 0, 0, time.UTC)

// TTL is the generated backups' spec.ttl.
const TTL = 720 * time.Hour

// Files maps storage keys to their contents.
type Files map[string][]byte

// Keys returns the keys, sorted.
func (f Files) Keys() []string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Items are the items of every generated backup's tarball: two
// ConfigMaps, a Secret, a Pod and a PersistentVolume, labelled app=shop.
func Items() []archivetest.ItemSpec {
	l := map[string]string{"app": "shop"}
	return []archivetest.ItemSpec{
		{Resource: "configmaps", Kind: "ConfigMap", Namespace: "shop", Name: "settings", Labels: l},
		{Resource: "configmaps", Kind: "ConfigMap", Namespace: "shop", Name: "flags", Labels: l},
		{Resource: "secrets", Kind: "Secret", Namespace: "shop", Name: "db-password", Labels: l},
		{Resource: "pods", Kind: "Pod", Namespace: "shop", Name: "web-0", Labels: l},
		{Resource: "persistentvolumes", Kind: "PersistentVolume", Name: "pv-data", Labels: l},
	}
}

// BackupObject is the velero-backup.json Velero 1.18 writes for a
// completed backup named name.
func BackupObject(name string) map[string]any {
	exp := Created.Add(TTL)
	return map[string]any{
		"apiVersion": velero.APIVersion,
		"kind":       velero.BackupKind,
		"metadata": map[string]any{
			"name": name, "namespace": "velero", "uid": UID(name),
			"creationTimestamp": Created.Format(time.RFC3339),
			"generation":        7,
			"resourceVersion":   "48213",
			"labels": map[string]any{
				"velero.io/storage-location": "default",
				"app":                        "shop",
			},
			"annotations": map[string]any{
				"velero.io/source-cluster-k8s-gitversion": "v1.33.1",
				"velero.io/resource-timeout":              "10m0s",
			},
		},
		"spec": map[string]any{
			"csiSnapshotTimeout":       "10m0s",
			"defaultVolumesToFsBackup": false,
			"hooks":                    map[string]any{},
			"includedNamespaces":       []string{"shop"},
			"itemOperationTimeout":     "4h0m0s",
			"metadata":                 map[string]any{},
			"snapshotMoveData":         false,
			"storageLocation":          "default",
			"ttl":                      TTL.String(),
			"volumeSnapshotLocations":  []string{"default"},
		},
		"status": map[string]any{
			"completionTimestamp":      Created.Add(42 * time.Second).Format(time.RFC3339),
			"expiration":               exp.Format(time.RFC3339),
			"formatVersion":            "1.1.0",
			"hookStatus":               map[string]any{},
			"phase":                    "Completed",
			"progress":                 map[string]any{"itemsBackedUp": len(Items()), "totalItems": len(Items())},
			"startTimestamp":           Created.Format(time.RFC3339),
			"version":                  1,
			"volumeSnapshotsAttempted": 1,
			"volumeSnapshotsCompleted": 1,
		},
	}
}

// Backup returns every file Velero 1.18 stores for a completed backup
// named name: velero-backup.json, the tarball, and the sibling files.
func Backup(name string) Files {
	f := Files{}
	meta, err := json.Marshal(BackupObject(name))
	if err != nil {
		panic(err)
	}
	f[velero.MetadataKey(name)] = meta
	var tb bytes.Buffer
	if err := archivetest.Write(&tb, Items(), archivetest.Options{PreferredVersionCopies: true}); err != nil {
		panic(err)
	}
	f[velero.TarballKey(name)] = tb.Bytes()
	for _, k := range velero.SiblingKeys(name) {
		f[k] = gz([]byte(fmt.Sprintf("[{\"file\":%q}]\n", filepath.Base(k))))
	}
	f[velero.VolumeSnapshotsKey(name)] = gz(mustJSON(VolumeSnapshots(name)))
	return f
}

// UID is metadata.uid of the generated backup named name.
func UID(name string) string { return "6b5a1c2e-0000-4000-8000-" + fmt.Sprintf("%012x", len(name)) }

// SnapshotID is the providerSnapshotID of the native volume snapshot the
// backup named name took of its volume pv-data: unique per backup, as a
// cloud's are.
func SnapshotID(name string) string {
	return fmt.Sprintf("snap-%016x", crc64.Checksum([]byte(name), crc64.MakeTable(crc64.ECMA)))
}

// VolumeSnapshots is the list Velero 1.18 writes in
// <name>-volumesnapshots.json.gz (a JSON array of volume.Snapshot,
// internal/volume/native_snapshot.go): the one native snapshot the backup
// named name took, of the persistent volume pv-data of its tarball.
func VolumeSnapshots(name string) []map[string]any {
	return []map[string]any{{
		"spec": map[string]any{
			"backupName": name, "backupUID": UID(name), "location": "default", "persistentVolumeName": "pv-data",
			"providerVolumeID": "vol-0a1b2c3d", "volumeType": "gp3", "volumeAZ": "eu-west-1a", "volumeIOPS": 3000,
		},
		"status": map[string]any{"providerSnapshotID": SnapshotID(name), "phase": "Completed"},
	}}
}

// VolumeSnapshotsFile is a list of volume snapshots as Velero stores it:
// gzip JSON, ended by the newline of Velero's encoder.
func VolumeSnapshotsFile(snaps []map[string]any) []byte { return gz(mustJSON(snaps)) }

// Restore returns the files Velero stores for a restore named name: they
// are not a backup's, and a purge must leave them.
func Restore(name string) Files {
	return Files{
		"restores/" + name + "/restore-" + name + "-logs.gz":    gz([]byte("restore log\n")),
		"restores/" + name + "/restore-" + name + "-results.gz": gz([]byte("{}\n")),
	}
}

// Bucket is the committed fixture bucket: the Velero backups
// "nightly-0412" and "nightly-04121" (whose name starts with the
// former's), "no-metadata" (a tarball and logs, no velero-backup.json),
// "bad-metadata" (a velero-backup.json that is not JSON), "failed" (a
// velero-backup.json without tarball), and a restore.
func Bucket() Files {
	f := Files{}
	for _, part := range []Files{Backup("nightly-0412"), Backup("nightly-04121"), Restore("nightly-0412-restore")} {
		for k, v := range part {
			f[k] = v
		}
	}
	nm := Backup("no-metadata")
	delete(nm, velero.MetadataKey("no-metadata"))
	for k, v := range nm {
		f[k] = v
	}
	bad := Backup("bad-metadata")
	bad[velero.MetadataKey("bad-metadata")] = []byte("{\"apiVersion\": \"velero.io/v1\", \"kind\": \"Backup\", \"metadata\": {")
	for k, v := range bad {
		f[k] = v
	}
	failed := Backup("failed")
	delete(failed, velero.TarballKey("failed"))
	for k, v := range failed {
		f[k] = v
	}
	return f
}

// WriteDir writes files under dir, one file per key.
func WriteDir(dir string, files Files) error {
	for _, k := range files.Keys() {
		p := filepath.Join(dir, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[k], 0o640); err != nil {
			return err
		}
	}
	return nil
}

// ReadDir reads every file under dir back into Files.
func ReadDir(dir string) (Files, error) {
	f := Files{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		f[filepath.ToSlash(rel)] = data
		return err
	})
	return f, err
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}
