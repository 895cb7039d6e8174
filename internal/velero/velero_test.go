package velero_test

import (
	"bytes"
	"compress/gzip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
	"github.com/lethehq/lethe/pkg/plugin"
)

// TestFixtureBucketIsGenerated: the committed Velero 1.18 fixture bucket is
// exactly what genbucket writes, so that anyone can regenerate it and
// nobody edits it by hand.
func TestFixtureBucketIsGenerated(t *testing.T) {
	got, err := velerotest.ReadDir("testdata/bucket-1.18")
	require.NoError(t, err)
	want := velerotest.Bucket()
	require.Equal(t, want.Keys(), got.Keys(), "run: go run ./internal/velero/testdata/genbucket")
	for _, k := range want.Keys() {
		require.Equal(t, want[k], got[k], "%s differs from the generator's; run: go run ./internal/velero/testdata/genbucket", k)
	}
}

// TestLayoutIsVelero118s: the keys of a backup's folder are those of
// Velero's object_store_layout.go.
func TestLayoutIsVelero118s(t *testing.T) {
	require.Equal(t, "backups/b1/velero-backup.json", velero.MetadataKey("b1"))
	require.Equal(t, "backups/b1/b1.tar.gz", velero.TarballKey("b1"))
	require.Equal(t, []string{
		"backups/b1/b1-logs.gz",
		"backups/b1/b1-results.gz",
		"backups/b1/b1-resource-list.json.gz",
		"backups/b1/b1-volumesnapshots.json.gz",
		"backups/b1/b1-podvolumebackups.json.gz",
		"backups/b1/b1-itemoperations.json.gz",
		"backups/b1/b1-csi-volumesnapshots.json.gz",
		"backups/b1/b1-csi-volumesnapshotcontents.json.gz",
		"backups/b1/b1-csi-volumesnapshotclasses.json.gz",
		"backups/b1/b1-volumeinfo.json.gz",
	}, velero.SiblingKeys("b1"))
	name, file, ok := velero.SplitKey("backups/b1/velero-backup.json")
	require.True(t, ok)
	require.Equal(t, "b1", name)
	require.Equal(t, velero.MetadataFile, file)
	for _, k := range []string{"restores/r/x.gz", "backups/b1", "backups/b1/x/y", "backups//x"} {
		_, _, ok := velero.SplitKey(k)
		require.False(t, ok, k)
	}
}

func TestParseBackup(t *testing.T) {
	files := velerotest.Backup("nightly")
	b, err := velero.ParseBackup(files[velero.MetadataKey("nightly")], "nightly")
	require.NoError(t, err)
	require.Equal(t, velerotest.Created, b.CreatedAt())
	require.Equal(t, velerotest.Created.Add(velerotest.TTL), b.ExpiresAt())
	ttl, err := b.TTL()
	require.NoError(t, err)
	require.Equal(t, velerotest.TTL, ttl)
	require.Equal(t, "default", b.Spec.StorageLocation)
	require.Equal(t, []string{"shop"}, b.Spec.IncludedNamespaces)
	require.Equal(t, "Completed", b.Status.Phase)
	require.Equal(t, "shop", b.Metadata.Labels["app"])

	for _, tc := range []struct{ name, data, want string }{
		{"not json", `{"kind":`, "not valid JSON"},
		{"not a backup", `{"apiVersion":"velero.io/v1","kind":"Restore","metadata":{"name":"nightly"}}`, `not a velero.io/v1 Backup`},
		{"other name", `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"other"}}`, `names the backup "other"`},
		{"bad ttl", `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"nightly"},"spec":{"ttl":"soon"}}`, "spec.ttl"},
		{"huge", `"` + strings.Repeat("x", velero.MaxMetadataSize) + `"`, "larger than"},
		{"escape in a namespace", `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"nightly"},"spec":{"includedNamespaces":["shop","x\u001b]52;c;ZXZpbA==\u0007"]}}`,
			`spec.includedNamespaces "x\x1b]52;c;ZXZpbA==\a" holds U+001B (a control character)`},
		{"bidi in the storage location", `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"nightly"},"spec":{"storageLocation":"de\u202efault"}}`,
			`spec.storageLocation "de\u202efault" holds U+202E (a bidi control)`},
		{"newline in the phase", `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"nightly"},"status":{"phase":"Completed\nlevel=INFO"}}`,
			`status.phase "Completed\nlevel=INFO" holds U+000A`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := velero.ParseBackup([]byte(tc.data), "nightly")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestBackupJSONIsAVeleroBackup(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	data, err := velero.BackupJSON(velero.PluginBackup{
		Name: "b1", UID: "u1", Labels: map[string]string{"a": "b"},
		CreatedAt: created, ExpiresAt: created.Add(48 * time.Hour), StorageLocation: "default",
	})
	require.NoError(t, err)
	b, err := velero.ParseBackup(data, "b1")
	require.NoError(t, err)
	require.Equal(t, created, b.CreatedAt())
	require.Equal(t, created.Add(48*time.Hour), b.ExpiresAt())
	require.Equal(t, "48h0m0s", b.Spec.TTL)
	require.Equal(t, "default", b.Spec.StorageLocation)
	require.Equal(t, "u1", b.Metadata.UID)
}

// TestParseVolumeSnapshots: Velero 1.18's list of native volume snapshots
// becomes one NativeVolumeSnapshot item per entry, Velero's spec and
// status carried as they are; a list Lethe cannot read is an error, never
// an empty list.
func TestParseVolumeSnapshots(t *testing.T) {
	files := velerotest.Backup("nightly")
	key := velero.VolumeSnapshotsKey("nightly")
	require.Equal(t, key, velero.VolumeSnapshotsKeyBeside(velero.TarballKey("nightly")))
	require.Empty(t, velero.VolumeSnapshotsKeyBeside("tarballs/nightly.tar.gz"))
	items, err := velero.ParseVolumeSnapshots(files[key], key)
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.Equal(t, "pv-data", items[0].Name)
	require.Equal(t, velerotest.SnapshotID("nightly"), items[0].ProviderSnapshotID)
	it := plugin.Item{Group: "lethe.io", Resource: "nativevolumesnapshots", Name: items[0].Name, Object: items[0].Object}
	s, err := it.NativeVolumeSnapshot()
	require.NoError(t, err)
	require.Equal(t, plugin.NativeVolumeSnapshotAPIVersion, s.APIVersion)
	require.Equal(t, plugin.NativeVolumeSnapshotKind, s.Kind)
	require.Equal(t, "nightly", s.Metadata.Labels[plugin.BackupNameLabel])
	require.Equal(t, "nightly", s.Spec.BackupName)
	require.Equal(t, velerotest.UID("nightly"), s.Spec.BackupUID)
	require.Equal(t, "default", s.Spec.Location)
	require.Equal(t, "vol-0a1b2c3d", s.Spec.ProviderVolumeID)
	require.Equal(t, "gp3", s.Spec.VolumeType)
	require.Equal(t, "eu-west-1a", s.Spec.VolumeAZ)
	require.Equal(t, int64(3000), *s.Spec.VolumeIOPS)
	require.Equal(t, velerotest.SnapshotID("nightly"), s.Status.ProviderSnapshotID)
	require.Equal(t, "Completed", s.Status.Phase)

	// Two snapshots of unnamed or same-named volumes get distinct names.
	two := velerotest.VolumeSnapshotsFile([]map[string]any{
		{"spec": map[string]any{"persistentVolumeName": "pv"}, "status": map[string]any{"phase": "Failed"}},
		{"spec": map[string]any{"persistentVolumeName": "pv"}},
		{"spec": map[string]any{}, "status": nil},
	})
	items, err = velero.ParseVolumeSnapshots(two, key)
	require.NoError(t, err)
	require.Equal(t, []string{"pv", "snapshot-1", "snapshot-2"}, []string{items[0].Name, items[1].Name, items[2].Name})

	// A volume name that would drive a terminal refuses the list.
	hostile := velerotest.VolumeSnapshotsFile([]map[string]any{{"spec": map[string]any{"persistentVolumeName": "pv\u009b2J"}}})
	_, err = velero.ParseVolumeSnapshots(hostile, key)
	require.ErrorContains(t, err, `persistentVolumeName "pv\u009b2J" holds U+009B (a control character)`)

	for _, empty := range []string{"null\n", "[]\n"} {
		items, err = velero.ParseVolumeSnapshots(gzipped(t, empty), key)
		require.NoError(t, err, empty)
		require.Empty(t, items)
	}
	for _, tc := range []struct{ name, data, want string }{
		{"not json", `[{"spec":`, "not a JSON list"},
		{"object", `{"spec":{}}`, "not a JSON list"},
		{"entry not object", `[1]`, "entry 0 is not a volume snapshot"},
		{"no spec", `[{"status":{}}]`, "entry 0 is not a volume snapshot"},
		{"two values", `[] []`, "more than one JSON value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := velero.ParseVolumeSnapshots(gzipped(t, tc.data), key)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err = velero.ParseVolumeSnapshots([]byte("[]"), key)
	require.ErrorContains(t, err, "not gzip")
}

// TestVolumeSnapshotBombsAreRefusedCheaply: a small gzip that expands to
// millions of tiny entries (a 130 KB file once cost 1.5 GB and two minutes
// of CPU) is refused at the entry cap, decoded one entry at a time, having
// allocated a few megabytes; one that expands past the size cap is refused
// too. A list at the entry cap is accepted.
func TestVolumeSnapshotBombsAreRefusedCheaply(t *testing.T) {
	key := velero.VolumeSnapshotsKey("bomb")
	entry := `{"spec":{}},`
	many := "[" + strings.Repeat(entry, 60<<20/len(entry)) + `{"spec":{}}]`
	bomb := gzipped(t, many)
	require.Less(t, len(bomb), 1<<20, "a small file")

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := velero.ParseVolumeSnapshots(bomb, key)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, key+" lists more than 10000 volume snapshots; refusing it")
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, uint64(32<<20), "allocated %d bytes", allocated)
	require.Less(t, took, 5*time.Second)

	huge := gzipped(t, `[{"spec":{"x":"`+strings.Repeat("A", velero.MaxVolumeSnapshotsSize)+`"}}]`)
	_, err = velero.ParseVolumeSnapshots(huge, key)
	require.ErrorContains(t, err, "is larger than 16777216 bytes decompressed; refusing it")

	atCap := gzipped(t, "["+strings.Repeat(entry, velero.MaxVolumeSnapshots-1)+`{"spec":{}}]`)
	items, err := velero.ParseVolumeSnapshots(atCap, key)
	require.NoError(t, err)
	require.Len(t, items, velero.MaxVolumeSnapshots)
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, err := w.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return b.Bytes()
}
