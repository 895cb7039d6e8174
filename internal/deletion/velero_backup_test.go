package deletion_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// serverAssigned are the fields of a Backup that Kubernetes' API server
// sets when Velero's sync creates the Backup in a cluster, and updates
// on every write: no file determines them, so they are not compared.
var serverAssigned = []string{"metadata.resourceVersion", "metadata.generation", "metadata.managedFields"}

// flatten maps every leaf of a JSON value to its dotted path.
func flatten(prefix string, v any, out map[string]any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, e, out)
		}
	case []any:
		for i, e := range x {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), e, out)
		}
	default:
		out[prefix] = v
	}
}

func fields(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(data, &v), "%s", data)
	out := map[string]any{}
	flatten("", v, out)
	for _, f := range serverAssigned {
		delete(out, f)
	}
	return out
}

// TestVeleroPluginGetsTheRecordedBackupAsVeleroSendsIt is issue 24
// point 4: what a plugin built with Velero's framework receives from
// Lethe, compared field by field with what Velero 1.18's controllers
// would hand it for the same velero-backup.json (computed by Velero's own
// code, in the plugin's module: `veleroplugin expect-deleting`): phase
// Deleting, Velero's metadata.uid, creationTimestamp and spec.ttl. The
// file is corrupted after the sync: the copy recorded at sync is used,
// never a Backup invented from the catalog. Lethe's own plugins get
// Lethe's identity and the source system's side by side.
func TestVeleroPluginGetsTheRecordedBackupAsVeleroSendsIt(t *testing.T) {
	ctx := context.Background()
	bin := buildVeleroPlugin(t)
	vdir := filepath.Join(t.TempDir(), "velero-plugins")
	require.NoError(t, os.Mkdir(vdir, 0o755))
	require.NoError(t, os.Link(bin, filepath.Join(vdir, "velero-recorder")))
	tmp := t.TempDir()
	dump, lethe := filepath.Join(tmp, "velero-backup.dump"), filepath.Join(tmp, "lethe-backup.dump")
	dir, storage := t.TempDir(), "file://"+filepath.Join(t.TempDir(), "bucket")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "plugins"), 0o750))
	copyBin(t, recorderBin, filepath.Join(dir, "plugins", "recorder"))
	hcfg := &pluginhost.Config{VeleroDir: vdir, PluginEnv: map[string]map[string]string{
		"velero-recorder": {"VELERO_RECORD_FILE": filepath.Join(tmp, "record.tsv"), "VELERO_BACKUP_DUMP": dump},
		"recorder":        {"LETHE_RECORD_FILE": filepath.Join(tmp, "lethe.txt"), "LETHE_RECORD_BACKUP": lethe},
	}}
	p := openVeleroPipelineWith(t, dir, storage, nil, hcfg)
	bucket := putBucket(t, p.blobs)
	const name = "nightly-0412"
	file := bucket[velero.MetadataKey(name)]
	_, err := p.reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	// After the sync, the file becomes unreadable as a Backup.
	require.NoError(t, p.blobs.Put(ctx, velero.MetadataKey(name), bytes.NewReader([]byte(`{"apiVersion": "velero.io/v1", "kind": "Backup", "metad`))))

	rep, err := p.del.Delete(ctx, name, deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result, "%+v", rep)

	got, err := os.ReadFile(dump)
	require.NoError(t, err, "the Velero plugin recorded no Backup")
	cmd := exec.Command(bin, "expect-deleting", "default")
	cmd.Stdin = bytes.NewReader(file)
	cmd.Stderr = os.Stderr
	want, err := cmd.Output()
	require.NoError(t, err)
	g, w := fields(t, got), fields(t, want)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range w {
			if !yield(k) {
				return
			}
		}
		for k := range g {
			if _, ok := w[k]; !ok && !yield(k) {
				return
			}
		}
	}) {
		if !reflect.DeepEqual(w[k], g[k]) {
			t.Errorf("%s: Velero sends %v, the plugin got %v from Lethe", k, w[k], g[k])
		}
	}
	// The facts the issue names, explicitly.
	require.Equal(t, "Deleting", g["status.phase"])
	require.Equal(t, velerotest.UID(name), g["metadata.uid"])
	require.Equal(t, velerotest.Created.Format(time.RFC3339), g["metadata.creationTimestamp"])
	require.Equal(t, velerotest.TTL.String(), g["spec.ttl"])

	// Lethe's plugins: Lethe's identity, and the source system's.
	var lb struct {
		Name, UID, SourceUID       string
		CreatedAt, SourceCreatedAt time.Time
		ExpiresAt                  time.Time
	}
	data, err := os.ReadFile(lethe)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &lb))
	require.Equal(t, name, lb.Name)
	require.Equal(t, velerotest.UID(name), lb.SourceUID)
	require.True(t, velerotest.Created.Equal(lb.SourceCreatedAt), "%s", lb.SourceCreatedAt)
	require.True(t, velerotest.Created.Add(velerotest.TTL).Equal(lb.ExpiresAt), "%s", lb.ExpiresAt)
	require.NotEqual(t, velerotest.UID(name), lb.UID, "uid is Lethe's own identity")
	require.NotEmpty(t, lb.UID)
	require.True(t, lb.CreatedAt.After(lb.SourceCreatedAt), "CreatedAt is when Lethe registered it: %s", lb.CreatedAt)
}

func copyBin(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, data, 0o750))
}
