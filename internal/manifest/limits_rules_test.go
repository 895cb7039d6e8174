package manifest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/manifest"
)

// TestLoadTakesExactlyMaxDocumentsAcrossFilesAndRefusesOneMore: the
// document limit counts the documents of every file of a folder together;
// the limit itself is allowed, one more is refused.
func TestLoadTakesExactlyMaxDocumentsAcrossFilesAndRefusesOneMore(t *testing.T) {
	dir := t.TempDir()
	docs := func(n int) []byte { return []byte(strings.Repeat("---\nkind: Database\nmetadata: {name: a}\n", n)) }
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), docs(5), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.yaml"), docs(5), 0o600))
	lim := manifest.DefaultLimits
	lim.MaxDocuments = 10
	got, err := manifest.Load(dir, nil, lim)
	require.NoError(t, err)
	require.Len(t, got, 10)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.yaml"), docs(1), 0o600))
	_, err = manifest.Load(dir, nil, lim)
	require.ErrorContains(t, err, "more than 10 documents")
}

// TestKindsUpTo63CharactersAreValid: a kind is at most 63 characters.
func TestKindsUpTo63CharactersAreValid(t *testing.T) {
	kind := "K" + strings.Repeat("a", 62)
	_, err := manifest.Parse(manifest.Source{Name: "m.yaml", Data: []byte("kind: " + kind + "\nmetadata: {name: a}\n")}, manifest.DefaultLimits)
	require.NoError(t, err)
	_, err = manifest.Parse(manifest.Source{Name: "m.yaml", Data: []byte("kind: " + kind + "a\nmetadata: {name: a}\n")}, manifest.DefaultLimits)
	require.ErrorContains(t, err, "kind")
}

// TestAnnotationsMayTotal256KiBAndNoMore: Kubernetes' cap on a resource's
// annotations, keys and values counted together.
func TestAnnotationsMayTotal256KiBAndNoMore(t *testing.T) {
	doc := func(value int) []byte {
		return []byte("kind: Database\nmetadata:\n  name: a\n  annotations:\n    example.com/a: '" + strings.Repeat("x", value) + "'\n")
	}
	limit := 256 << 10
	value := limit - len("example.com/a")
	_, err := manifest.Parse(manifest.Source{Name: "m.yaml", Data: doc(value)}, manifest.DefaultLimits)
	require.NoError(t, err)
	_, err = manifest.Parse(manifest.Source{Name: "m.yaml", Data: doc(value + 1)}, manifest.DefaultLimits)
	require.ErrorContains(t, err, "262145 bytes in all, at most 262144")
}

// TestNullMeansAbsentInOptionalFields: an optional field written as null
// is taken as absent, as Kubernetes does; a required one is still
// required (a bundle's spec.resources).
func TestNullMeansAbsentInOptionalFields(t *testing.T) {
	text := "kind: Database\nmetadata: {name: a, namespace: null, labels: null, annotations: null, ownerReferences: null}\nreferences: null\nspec: null\nstatus: ~\n"
	docs, err := manifest.Parse(manifest.Source{Name: "m.yaml", Data: []byte(text)}, manifest.DefaultLimits)
	require.NoError(t, err)
	require.Len(t, docs, 1)
	require.Empty(t, docs[0].Metadata.Namespace)

	docs, err = manifest.Parse(manifest.Source{Name: "b.yaml", Data: []byte("kind: Bundle\nmetadata: {name: shop}\nspec: {resources: null}\n")}, manifest.DefaultLimits)
	require.NoError(t, err)
	_, err = manifest.ParseBundle(docs[0])
	require.ErrorContains(t, err, "spec.resources: required (it may be empty: [])")
}

func parseOne(t *testing.T, text string) error {
	t.Helper()
	_, err := manifest.Parse(manifest.Source{Name: "m.yaml", Data: []byte(text)}, manifest.DefaultLimits)
	return err
}

// TestResourceVersionMustBePositive: 0 is not a version (leave the field
// out to apply without the check); null is absent.
func TestResourceVersionMustBePositive(t *testing.T) {
	require.ErrorContains(t, parseOne(t, "kind: Database\nmetadata: {name: a, resourceVersion: 0}\n"), "must be positive")
	require.ErrorContains(t, parseOne(t, "kind: Database\nmetadata: {name: a, resourceVersion: '0'}\n"), "must be positive")
	require.NoError(t, parseOne(t, "kind: Database\nmetadata: {name: a, resourceVersion: 1}\n"))
	require.NoError(t, parseOne(t, "kind: Database\nmetadata: {name: a, resourceVersion: null, ownerReferences: [{kind: Team, name: t, blockOwnerDeletion: null}]}\n"))
}

// TestOnlyTheSameOwnerTwiceIsRefused: two owners of one kind with
// different names are fine; the same owner twice is refused.
func TestOnlyTheSameOwnerTwiceIsRefused(t *testing.T) {
	require.NoError(t, parseOne(t, "kind: Database\nmetadata: {name: a, ownerReferences: [{kind: Team, name: x}, {kind: Team, name: y}, {kind: Org, name: x}]}\n"))
	require.ErrorContains(t, parseOne(t, "kind: Database\nmetadata: {name: a, ownerReferences: [{kind: Team, name: x}, {kind: Team, name: x}]}\n"), "owner Team/x appears twice")
}

// TestOnlyAReferenceToItselfIsRefused: a resource may reference another of
// its kind, in its namespace or another, or one of its name of another
// kind; not itself.
func TestOnlyAReferenceToItselfIsRefused(t *testing.T) {
	ref := func(kind, ns, name string) string {
		return "kind: Database\nmetadata: {name: a, namespace: prod}\nreferences: [{kind: " + kind + ", namespace: " + ns + ", name: " + name + ", onTargetDelete: block}]\n"
	}
	require.NoError(t, parseOne(t, ref("Database", "prod", "b")))
	require.NoError(t, parseOne(t, ref("Database", "dev", "a")))
	require.NoError(t, parseOne(t, ref("Volume", "prod", "a")))
	require.ErrorContains(t, parseOne(t, ref("Database", "prod", "a")), "a resource cannot reference itself")
}

// TestAFolderMayTotalExactlyMaxTotalBytes: the folder's cap is allowed,
// one byte more is refused.
func TestAFolderMayTotalExactlyMaxTotalBytes(t *testing.T) {
	dir := t.TempDir()
	a := []byte("kind: Database\nmetadata: {name: a}\n")
	b := []byte("kind: Database\nmetadata: {name: b}\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), a, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.yaml"), b, 0o600))
	lim := manifest.DefaultLimits
	lim.MaxTotalBytes = int64(len(a) + len(b))
	_, err := manifest.Load(dir, nil, lim)
	require.NoError(t, err)
	lim.MaxTotalBytes--
	_, err = manifest.Load(dir, nil, lim)
	require.ErrorContains(t, err, "larger than")
}

// TestAFileMayBeExactlyMaxFileBytes: the per-file cap is allowed, one byte
// more is refused.
func TestAFileMayBeExactlyMaxFileBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.yaml")
	a := []byte("kind: Database\nmetadata: {name: a}\n")
	require.NoError(t, os.WriteFile(path, a, 0o600))
	lim := manifest.DefaultLimits
	lim.MaxFileBytes = int64(len(a))
	_, err := manifest.Load(path, nil, lim)
	require.NoError(t, err)
	lim.MaxFileBytes--
	_, err = manifest.Load(path, nil, lim)
	require.ErrorContains(t, err, "larger than")
}

// TestNestingMayReachMaxDepthAndNoFurther: with MaxDepth 6, a spec that
// nests five mappings is the deepest allowed; one more level is refused.
func TestNestingMayReachMaxDepthAndNoFurther(t *testing.T) {
	lim := manifest.DefaultLimits
	lim.MaxDepth = 6
	nested := func(k int) []byte {
		return []byte("kind: Database\nmetadata: {name: a}\nspec: " + strings.Repeat("{a: ", k) + "1" + strings.Repeat("}", k) + "\n")
	}
	_, err := manifest.Parse(manifest.Source{Name: "m.yaml", Data: nested(5)}, lim)
	require.NoError(t, err)
	_, err = manifest.Parse(manifest.Source{Name: "m.yaml", Data: nested(6)}, lim)
	require.ErrorContains(t, err, "nested deeper than 6 levels")
}

// TestOneFileMayHoldExactlyMaxDocuments: the document cap within one file
// is allowed, one more is refused.
func TestOneFileMayHoldExactlyMaxDocuments(t *testing.T) {
	lim := manifest.DefaultLimits
	lim.MaxDocuments = 10
	docs := func(n int) []byte { return []byte(strings.Repeat("---\nkind: Database\nmetadata: {name: a}\n", n)) }
	got, err := manifest.Parse(manifest.Source{Name: "m.yaml", Data: docs(10)}, lim)
	require.NoError(t, err)
	require.Len(t, got, 10)
	_, err = manifest.Parse(manifest.Source{Name: "m.yaml", Data: docs(11)}, lim)
	require.ErrorContains(t, err, "more than 10 documents")
}
