package manifest_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/manifest"
)

// TestPackedUnpacksWhatLoadReturns: every field of every document, nil
// and empty alike, comes back from a Packed as Load returns it, in order,
// whether unpacked in order (All, Drain), at a position (At) or by kind
// (OfKind); an invalid file is refused by Packed.Load as by Load.
func TestPackedUnpacksWhatLoadReturns(t *testing.T) {
	const text = "---\nkind: Zone\nmetadata: {name: eu-1, labels: {}}\n" +
		"---\nkind: Volume\nmetadata:\n  name: vol\n  namespace: prod\n  labels: {app: shop, tier: db}\n" +
		"  annotations: {example.com/note: kept}\n  finalizers: [example.com/drain]\n  resourceVersion: 7\n" +
		"  ownerReferences: [{kind: Database, name: orders, uid: u-1, blockOwnerDeletion: true}, {kind: Node, name: n}]\n" +
		"references: [{kind: Zone, name: eu-1, onTargetDelete: cascade}, {kind: Disk, namespace: prod, name: d, onTargetDelete: allowDangling}, {kind: Database, namespace: prod, name: orders, peer: eu-west, onTargetDelete: block}]\n" +
		"spec: {size: 10, tags: [a, b]}\nstatus: {}\n" +
		"---\n[{kind: ConfigMap, metadata: {name: a, namespace: prod, labels: {app: shop}}, spec: {}}, {kind: ConfigMap, metadata: {name: b, namespace: prod, labels: {app: shop}}}]\n"
	dir := t.TempDir()
	file := filepath.Join(dir, "m.yaml")
	require.NoError(t, os.WriteFile(file, []byte(text), 0o600))
	want, err := manifest.Load(file, nil, manifest.DefaultLimits)
	require.NoError(t, err)
	require.Len(t, want, 4)

	var p manifest.Packed
	require.NoError(t, p.Load(file, nil, manifest.DefaultLimits))
	require.Equal(t, 4, p.Len())
	assert.Equal(t, want, slices.Collect(p.All()))
	assert.Equal(t, want[2:], p.OfKind("ConfigMap"))

	var q manifest.Packed
	var pos []int
	for _, d := range want {
		pos = append(pos, q.Add(d))
	}
	for i := len(pos) - 1; i >= 0; i-- {
		assert.Equal(t, want[i], q.At(pos[i]), "document %d", i)
	}
	assert.Equal(t, want, slices.Collect(p.Drain()))
	assert.Equal(t, 0, p.Len())
	assert.Empty(t, slices.Collect(p.All()), "drained")

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(text+"---\nkind: ConfigMap\nmetadata: {name: Bad}\n"), 0o600))
	_, lerr := manifest.Load(bad, nil, manifest.DefaultLimits)
	require.Error(t, lerr)
	var r manifest.Packed
	require.EqualError(t, r.Load(bad, nil, manifest.DefaultLimits), lerr.Error())
}
