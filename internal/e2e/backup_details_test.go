package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// backupDescription is the part of 'backup describe --details -o json'
// the tests read.
type backupDescription struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Resource   struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"resource"`
	Details struct {
		NamesPerType int `json:"namesPerType"`
		ResourceList []struct {
			Key           string   `json:"key"`
			GroupResource string   `json:"groupResource"`
			Count         int64    `json:"count"`
			Names         []string `json:"names"`
			More          int64    `json:"more"`
		} `json:"resourceList"`
		ResourceListError string `json:"resourceListError"`
		VolumeSnapshots   []struct {
			Name       string `json:"name"`
			SnapshotID string `json:"snapshotID"`
		} `json:"volumeSnapshots"`
		PluginOutcomes []struct {
			Plugin    string `json:"plugin"`
			Done      int64  `json:"done"`
			Blocked   int64  `json:"blocked"`
			Unsettled []struct {
				ItemKey string `json:"itemKey"`
				Outcome string `json:"outcome"`
			} `json:"unsettled"`
		} `json:"pluginOutcomes"`
	} `json:"details"`
}

func (e *env) describeDetails(name string) backupDescription {
	e.t.Helper()
	r := e.ok("backup", "describe", name, "--details", "-o", "json")
	var d backupDescription
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
	return d
}

// TestBackupDescribeDetailsListsResourcesSnapshotsAndPluginOutcomes:
// 'backup describe NAME --details', as velero backup describe --details,
// adds to the description the backup's resource list read from its
// tarball (Velero's group/version/kind keys, a count and the names), its
// native volume snapshots, and each plugin's item outcomes once a
// deletion ran; -o json prints the same as one BackupDescription.
func TestBackupDescribeDetailsListsResourcesSnapshotsAndPluginOutcomes(t *testing.T) {
	e := newEnv(t, pluginNative, pluginNoop)
	require.NoError(t, velerotest.WriteDir(e.storageDir(), velerotest.Bucket()))
	a := "nightly-0412"
	require.NoError(t, os.WriteFile(filepath.Join(e.cloud, velerotest.SnapshotID(a)), []byte("snapshot"), 0o600))
	require.Equal(t, 3, e.run("backup", "sync").code, "the bucket's bad-metadata folder is rejected")

	out := e.ok("backup", "describe", a, "--details").stdout
	require.Contains(t, out, "Name:       "+a+"\n", "the usual description comes first")
	assert.Contains(t, out, "\nResource List:\n"+
		"  v1/ConfigMap (2 items):\n    - shop/settings\n    - shop/flags\n"+
		"  v1/PersistentVolume (1 item):\n    - pv-data\n"+
		"  v1/Pod (1 item):\n    - shop/web-0\n"+
		"  v1/Secret (1 item):\n    - shop/db-password\n", out)
	assert.Contains(t, out, "\nVelero-Native Snapshots:\n  pv-data:\n    Snapshot ID:        "+velerotest.SnapshotID(a)+"\n", out)
	assert.Contains(t, out, "\nPlugin Outcomes:  <no deletion ran>\n", out)

	d := e.describeDetails(a)
	assert.Equal(t, "lethe.io/v1", d.APIVersion)
	assert.Equal(t, "BackupDescription", d.Kind)
	assert.Equal(t, "Backup", d.Resource.Kind)
	assert.Equal(t, a, d.Resource.Metadata.Name)
	require.Len(t, d.Details.ResourceList, 4)
	assert.Equal(t, "v1/ConfigMap", d.Details.ResourceList[0].Key)
	assert.Equal(t, "configmaps", d.Details.ResourceList[0].GroupResource)
	assert.Equal(t, int64(2), d.Details.ResourceList[0].Count)
	assert.Equal(t, []string{"shop/settings", "shop/flags"}, d.Details.ResourceList[0].Names)
	require.Len(t, d.Details.VolumeSnapshots, 1)
	assert.Equal(t, velerotest.SnapshotID(a), d.Details.VolumeSnapshots[0].SnapshotID)
	assert.Empty(t, d.Details.PluginOutcomes)

	// A deletion that ran: the snapshot is in use, its plugin blocked.
	require.NoError(t, os.WriteFile(filepath.Join(e.cloud, velerotest.SnapshotID(a)+".lock"), nil, 0o600))
	require.Equal(t, 3, e.run("backup", "delete", a, "--yes").code)
	out = e.ok("backup", "describe", a, "--details").stdout
	assert.Contains(t, out, "\nPlugin Outcomes:\n  lethe.io/native-snapshots: 0 done, 0 skipped, 0 failed, 1 blocked\n    blocked nativevolumesnapshots.lethe.io//pv-data  lethe.io/native-snapshots: ", out)
	assert.Contains(t, out, "  lethe.io/noop: 4 done, 0 skipped, 0 failed, 0 blocked\n", out)
	d = e.describeDetails(a)
	require.Len(t, d.Details.PluginOutcomes, 2)
	assert.Equal(t, "lethe.io/native-snapshots", d.Details.PluginOutcomes[0].Plugin)
	assert.Equal(t, int64(1), d.Details.PluginOutcomes[0].Blocked)
	require.Len(t, d.Details.PluginOutcomes[0].Unsettled, 1)
	assert.Equal(t, "nativevolumesnapshots.lethe.io//pv-data", d.Details.PluginOutcomes[0].Unsettled[0].ItemKey)
}

// TestBackupDescribeDetailsIsBounded: at most 20 names per resource type
// are listed, then "… and N more" (the count is whole); a backup without
// native snapshots says so; a tarball that is not the one registered, or
// none, is said in the list's place and the rest is still shown;
// --details describes one backup.
func TestBackupDescribeDetailsIsBounded(t *testing.T) {
	e := newEnv(t)
	e.create("big", 7*25) // 25 items of each of 7 types
	out := e.ok("backup", "describe", "big", "--details").stdout
	assert.Contains(t, out, "  v1/Pod (25 items):\n    - ns-0/pod-0\n", out)
	assert.Contains(t, out, "    … and 5 more\n", out)
	assert.Equal(t, 7, strings.Count(out, "    … and 5 more\n"), out)
	assert.Contains(t, out, "\nVelero-Native Snapshots:  <none included>\n", out)
	d := e.describeDetails("big")
	assert.Equal(t, 20, d.Details.NamesPerType)
	require.Len(t, d.Details.ResourceList, 7)
	for _, rt := range d.Details.ResourceList {
		assert.Equal(t, int64(25), rt.Count, rt.Key)
		assert.Len(t, rt.Names, 20, rt.Key)
		assert.Equal(t, int64(5), rt.More, rt.Key)
	}
	assert.Contains(t, e.ok("backup", "describe", "--help").stdout, "at most 20 names per resource type")

	// Another tarball in its place is not listed as the backup's.
	var spec backupJSON
	require.NoError(t, json.Unmarshal([]byte(e.ok("backup", "get", "big", "-o", "json").stdout), &spec))
	tarball := filepath.Join(e.storageDir(), spec.Spec.StorageKey)
	copyFile(t, e.writeTarball("other", 3), tarball, 0o640)
	out = e.ok("backup", "describe", "big", "--details").stdout
	assert.Regexp(t, `\nResource List:  <tarball backups/big/big.tar.gz is not the one registered \(sha256 [0-9a-f]+, registered `+spec.Spec.Digest+`\)>\n`, out)
	assert.NotContains(t, out, "pod-0", out)

	require.NoError(t, os.Remove(tarball))
	out = e.ok("backup", "describe", "big", "--details").stdout
	assert.Regexp(t, `\nResource List:  <tarball .*not found.*>\n`, out)
	assert.Contains(t, out, "\nPlugin Outcomes:  <no deletion ran>\n", out)

	r := e.run("backup", "describe", "big", "other", "--details")
	requireOneErrorLine(t, r, "--details describes one backup")
	assert.Equal(t, 2, r.code)
}
