package apply_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/manifest"
)

// TestApplyPackedTakesTheDocumentsAChunkAtATime: ApplyPacked unpacks the
// documents as the plan takes them and plans them a chunk at a time, so
// that an apply of tens of thousands never holds them all: after any
// document it takes, at most one chunk (512) has been taken and not yet
// planned, dry run or not. What it writes is what the documents say
// (labels, annotations, finalizers, owners, references, spec, status), a
// create's desired state packed until the write; the packed input is
// empty afterwards.
func TestApplyPackedTakesTheDocumentsAChunkAtATime(t *testing.T) {
	const rich = "---\nkind: Zone\nmetadata: {name: eu-1}\n" +
		"---\nkind: Database\nmetadata: {name: orders, namespace: prod}\n" +
		"---\nkind: Volume\nmetadata:\n  name: vol\n  namespace: prod\n  labels: {app: shop, tier: db}\n" +
		"  annotations: {example.com/note: kept}\n  finalizers: [example.com/drain]\n" +
		"  ownerReferences: [{kind: Database, name: orders, blockOwnerDeletion: true}]\n" +
		"references: [{kind: Zone, name: eu-1, onTargetDelete: cascade}]\n" +
		"spec: {size: 10, tags: [a, b]}\nstatus: {ready: true}\n"
	file := filepath.Join(t.TempDir(), "big.yaml")
	require.NoError(t, os.WriteFile(file, []byte(filler(1300)+rich), 0o600))
	load := func(t *testing.T) *manifest.Packed {
		var p manifest.Packed
		require.NoError(t, p.Load(file, nil, manifest.DefaultLimits))
		return &p
	}
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		for _, dry := range []bool{true, false} {
			most, total := 0, 0
			opts := apply.Options{DryRun: dry}
			apply.WithChunkTaken(&opts, func(n int) {
				most, total = max(most, n), total+1
			})
			p := load(t)
			require.Equal(t, 1303, p.Len())
			res, err := e.ApplyPacked(ctx, p, opts)
			require.NoError(t, err)
			assert.Equal(t, "1303 created", res.Summary(), "dry run %v", dry)
			assert.Equal(t, 1303, total, "every document taken once")
			assert.LessOrEqual(t, most, apply.ReadChunk, "documents taken and not yet planned, dry run %v", dry)
			assert.Equal(t, 0, p.Len(), "the packed input is let go")
		}
		vol := get(t, st, "Volume", "prod", "vol")
		assert.Equal(t, map[string]string{"app": "shop", "tier": "db"}, vol.Labels)
		assert.Equal(t, map[string]string{"example.com/note": "kept"}, vol.Annotations)
		assert.Equal(t, []string{"example.com/drain"}, vol.Finalizers)
		require.Len(t, vol.Owners, 1)
		assert.Equal(t, catalog.OwnerRef{UID: get(t, st, "Database", "prod", "orders").UID, Kind: "Database", Name: "orders", BlockOwnerDeletion: true}, vol.Owners[0])
		require.Len(t, vol.References, 1)
		assert.Equal(t, catalog.RefCascade, vol.References[0].OnTargetDelete)
		assert.JSONEq(t, `{"size":10,"tags":["a","b"]}`, string(vol.Spec))
		assert.JSONEq(t, `{"ready":true}`, string(vol.Status))
		var spec map[string]any
		require.NoError(t, json.Unmarshal(get(t, st, "ConfigMap", "prod", "cm-0007").Spec, &spec))
		assert.Equal(t, map[string]any{"v": "a"}, spec)
	})
}
