package deletion_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/registry"
)

// TestVeleroPluginShortNamesSelectAsInVelero is issue 24 point 6 in the
// pipeline: a plugin built with Velero's framework whose AppliesTo names
// "cm" and "pv" (as Velero users write them; Velero resolves them through
// discovery) is expected at sync for, and receives, the backup's
// ConfigMaps and PersistentVolume, and nothing else.
func TestVeleroPluginShortNamesSelectAsInVelero(t *testing.T) {
	ctx := context.Background()
	bin := buildVeleroPlugin(t)
	vdir := filepath.Join(t.TempDir(), "velero-plugins")
	require.NoError(t, os.Mkdir(vdir, 0o755))
	require.NoError(t, os.Link(bin, filepath.Join(vdir, "velero-recorder")))
	record := filepath.Join(t.TempDir(), "record.tsv")
	hcfg := &pluginhost.Config{VeleroDir: vdir, PluginEnv: map[string]map[string]string{
		"velero-recorder": {"VELERO_RECORD_FILE": record, "VELERO_SHORT_NAMES": "1"},
	}}
	dir, storage := t.TempDir(), "file://"+filepath.Join(t.TempDir(), "bucket")
	p := openVeleroPipelineWith(t, dir, storage, nil, hcfg)
	putBucket(t, p.blobs)
	_, err := p.reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	r, err := p.store.Get(ctx, backup.Key("nightly-0412"))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.Equal(t, int64(3), b.Spec.ExpectedPlugins["example.io/short"].Items, "two ConfigMaps and a PersistentVolume")

	rep, err := p.del.Delete(ctx, "nightly-0412", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result, "%+v", rep)
	data, err := os.ReadFile(record)
	require.NoError(t, err)
	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if f := strings.Split(l, "\t"); f[0] == "example.io/short" {
			got = append(got, f[1]+" "+f[2])
		}
	}
	require.ElementsMatch(t, []string{"ConfigMap shop/flags", "ConfigMap shop/settings", "PersistentVolume /pv-data"}, got)
}
