package velero_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
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
