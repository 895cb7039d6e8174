package manifest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
)

const example = `kind: VolumeSnapshot
metadata:
  name: snap-a
  namespace: prod
  labels: {team: db}
  annotations: {lethe.io/deletion-delay: 24h}
  ownerReferences:
  - {kind: Backup, name: nightly-0412, blockOwnerDeletion: true}
  finalizers: [example.com/drain]
references:
- {kind: Database, namespace: prod, name: orders, onTargetDelete: block}
spec: {snapshotHandle: snap-0a1b}
---
# an empty document is skipped
---
kind: Database
metadata: {name: orders, namespace: prod, resourceVersion: "42"}
`

func parse(t *testing.T, text string) ([]*manifest.Document, error) {
	t.Helper()
	return manifest.Parse(manifest.Source{Name: "m.yaml", Data: []byte(text)}, manifest.DefaultLimits)
}

func TestParseExample(t *testing.T) {
	docs, err := parse(t, example)
	require.NoError(t, err)
	require.Len(t, docs, 2)
	d := docs[0]
	assert.Equal(t, catalog.Key{Kind: "VolumeSnapshot", Namespace: "prod", Name: "snap-a"}, d.Key())
	assert.Equal(t, map[string]string{"team": "db"}, d.Metadata.Labels)
	assert.Equal(t, []manifest.OwnerReference{{Kind: "Backup", Name: "nightly-0412", BlockOwnerDeletion: true}}, d.Metadata.OwnerReferences)
	assert.Equal(t, []string{"example.com/drain"}, d.Metadata.Finalizers)
	assert.Equal(t, []manifest.Reference{{Kind: "Database", Namespace: "prod", Name: "orders", OnTargetDelete: catalog.RefBlock}}, d.References)
	assert.JSONEq(t, `{"snapshotHandle":"snap-0a1b"}`, string(d.Spec))
	assert.Equal(t, 1, d.Index)
	assert.Equal(t, 3, docs[1].Index)
	assert.Equal(t, int64(42), docs[1].Metadata.ResourceVersion)
	r := d.Resource()
	assert.Equal(t, "24h", r.Annotations[catalog.AnnotationDeletionDelay])
	assert.Empty(t, r.Owners, "owner uids come from the catalog")
	delay, ok := d.DeletionDelay()
	assert.True(t, ok)
	assert.Equal(t, "24h0m0s", delay.String())
}

func TestParseJSON(t *testing.T) {
	// One object, an array of objects, a List, and several concatenated.
	for name, text := range map[string]string{
		"object": `{"kind":"Database","metadata":{"name":"a"}}
{"kind":"Database","metadata":{"name":"b"}}`,
		"array": `[{"kind":"Database","metadata":{"name":"a"}},{"kind":"Database","metadata":{"name":"b"}}]`,
		"list":  `{"kind":"List","items":[{"kind":"Database","metadata":{"name":"a"}},{"kind":"Database","metadata":{"name":"b"}}]}`,
		// What lethe get KIND -o json prints.
		"kindList": `{"apiVersion":"lethe.io/v1","kind":"DatabaseList","items":[{"apiVersion":"lethe.io/v1","kind":"Database","metadata":{"name":"a"}},{"kind":"Database","metadata":{"name":"b"}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			docs, err := parse(t, text)
			if name == "object" {
				// Concatenated JSON values without --- are not a YAML stream.
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Len(t, docs, 2)
			assert.Equal(t, "b", docs[1].Metadata.Name)
		})
	}
}

// What lethe get prints is a manifest: apiVersion lethe.io/v1 and the
// fields Lethe sets (uid, timestamps, lifecycle) are accepted and not
// taken as the author's.
func TestParseAcceptsWhatGetPrintsAndIgnoresLethesFields(t *testing.T) {
	docs, err := parse(t, `apiVersion: lethe.io/v1
kind: Database
metadata:
  name: orders
  uid: 0b5d
  resourceVersion: 3
  creationTimestamp: "2026-01-02T03:04:05Z"
  deletionTimestamp: "2026-01-02T03:04:05Z"
spec: {size: 1}
lifecycle: {phase: Active, updatedAt: "2026-01-02T03:04:05Z"}
`)
	require.NoError(t, err)
	require.Len(t, docs, 1)
	r := docs[0].Resource()
	assert.Empty(t, r.UID)
	assert.Nil(t, r.DeletionTimestamp)
	assert.True(t, r.CreatedAt.IsZero())
	assert.Empty(t, r.Phase)
	assert.Equal(t, int64(3), docs[0].Metadata.ResourceVersion)
}

// Each bad manifest is refused with one line naming the source, the
// document and the field.
func TestParseRefusals(t *testing.T) {
	ok := "kind: Database\nmetadata: {name: ok}\n---\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"no kind", "metadata: {name: a}", `m.yaml, document 2: kind: required`},
		{"bad kind", "kind: data-base\nmetadata: {name: a}", `kind: invalid kind "data-base"`},
		{"no metadata", "kind: Database", `metadata: required`},
		{"no name", "kind: Database\nmetadata: {namespace: x}", `metadata.name: required`},
		{"bad name", "kind: Database\nmetadata: {name: Orders_DB}", `metadata.name: invalid name "Orders_DB"`},
		{"bad namespace", "kind: Database\nmetadata: {name: a, namespace: a.b}", `metadata.namespace: invalid namespace "a.b"`},
		{"name too long", "kind: Database\nmetadata: {name: " + strings.Repeat("a", 300) + "}", `metadata.name: invalid name (300 characters): a name has at most 253`},
		{"namespace too long", "kind: Database\nmetadata: {name: a, namespace: " + strings.Repeat("a", 64) + "}", `metadata.namespace: invalid namespace (64 characters): a namespace has at most 63`},
		{"bad label key", "kind: Database\nmetadata: {name: a, labels: {'-x': y}}", `metadata.labels["-x"]: invalid label key`},
		{"bad label value", "kind: Database\nmetadata: {name: a, labels: {team: 'a b'}}", `metadata.labels["team"]: invalid label value "a b"`},
		{"label not string", "kind: Database\nmetadata: {name: a, labels: {n: 1}}", `metadata.labels["n"]: want a string, got a number`},
		{"bad delay", "kind: Database\nmetadata: {name: a, annotations: {lethe.io/deletion-delay: soon}}", `metadata.annotations["lethe.io/deletion-delay"]: invalid duration "soon"`},
		{"bad policy", "kind: Database\nmetadata: {name: a}\nreferences: [{kind: Disk, name: d, onTargetDelete: keep}]", `references[0].onTargetDelete: invalid policy "keep"`},
		{"no policy", "kind: Database\nmetadata: {name: a}\nreferences: [{kind: Disk, name: d}]", `references[0].onTargetDelete: required`},
		{"self reference", "kind: Database\nmetadata: {name: a}\nreferences: [{kind: Database, name: a, onTargetDelete: block}]", `references[0]: a resource cannot reference itself`},
		{"bad peer", "kind: App\nmetadata: {name: a}\nreferences: [{kind: Database, name: d, peer: EU_1, onTargetDelete: block}]", `references[0].peer: invalid peer name "EU_1"`},
		{"peer not a string", "kind: App\nmetadata: {name: a}\nreferences: [{kind: Database, name: d, peer: 1, onTargetDelete: block}]", `references[0].peer: want a string`},
		{"same peer target twice", "kind: App\nmetadata: {name: a}\nreferences: [{kind: Database, name: d, peer: eu, onTargetDelete: block}, {kind: Database, name: d, peer: eu, onTargetDelete: unset}]", `references[1]: a second reference to Database/d on peer eu`},
		{"self owner", "kind: Database\nmetadata: {name: a, ownerReferences: [{kind: Database, name: a}]}", `metadata.ownerReferences[0]: owner cycle`},
		{"owner twice", "kind: Database\nmetadata: {name: a, ownerReferences: [{kind: B, name: b}, {kind: B, name: b}]}", `metadata.ownerReferences[1]: owner B/b appears twice`},
		{"owner bad name", "kind: Database\nmetadata: {name: a, ownerReferences: [{kind: B, name: B}]}", `metadata.ownerReferences[0].name: invalid name "B"`},
		{"block not bool", "kind: Database\nmetadata: {name: a, ownerReferences: [{kind: B, name: b, blockOwnerDeletion: 'yes'}]}", `blockOwnerDeletion: want true or false`},
		{"unknown field", "kind: Database\nmetadata: {name: a}\nspecs: {}", `specs: unknown field`},
		{"apiVersion", "apiVersion: v1\nkind: Database\nmetadata: {name: a}", `apiVersion: want lethe.io/v1 (or leave it out), got v1`},
		{"generation", "kind: Database\nmetadata: {name: a, generation: 2}", `metadata.generation: unknown field (set by Lethe`},
		{"list apiVersion", "apiVersion: v2\nkind: DatabaseList\nitems: []", `apiVersion: want lethe.io/v1`},
		{"bare finalizer", "kind: Database\nmetadata: {name: a, finalizers: [drain]}", `metadata.finalizers[0]: invalid finalizer "drain"`},
		{"spec list", "kind: Database\nmetadata: {name: a}\nspec: [1]", `spec: want a mapping, got a list`},
		{"bad rv", "kind: Database\nmetadata: {name: a, resourceVersion: abc}", `metadata.resourceVersion: want a number`},
		{"not a mapping", "just text", `document 2: want a mapping, got a string`},
		{"duplicate key", "kind: Database\nkind: Disk\nmetadata: {name: a}", `key "kind" appears twice`},
		{"merge key", "base: &b {name: a}\nkind: Database\nmetadata: {<<: *b}", `merge keys`},
		{"syntax", "kind: [", `not valid YAML or JSON`},
		{"custom tag", "kind: !foo Database\nmetadata: {name: a}", `unsupported tag !foo`},
		{"nested list", "kind: List\nitems: [{kind: List, items: []}]", `kind: a List may not be nested`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, ok+tc.doc)
			require.Error(t, err)
			msg := err.Error()
			assert.Contains(t, msg, tc.want)
			assert.Contains(t, msg, "m.yaml, document 2")
			assert.NotContains(t, msg, "\n", "one line")
		})
	}
}

func TestHostileInput(t *testing.T) {
	lim := manifest.DefaultLimits
	// Billion laughs: nine levels of ten aliases each.
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	_, err := manifest.Parse(manifest.Source{Name: "bomb.yaml", Data: []byte(b.String())}, lim)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "once aliases are expanded")

	deep := "kind: Database\nmetadata: {name: a}\nspec: {x: " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "}"
	_, err = manifest.Parse(manifest.Source{Name: "deep.yaml", Data: []byte(deep)}, lim)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nested deeper than 64 levels")

	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte("kind: Database\nmetadata: {name: a}\nspec: {x: '"+strings.Repeat("y", 200)+"'}"), 0o600))
	small := lim
	small.MaxFileBytes = 100
	_, err = manifest.Load(big, nil, small)
	require.ErrorContains(t, err, "larger than 100 bytes")

	many := strings.Repeat("---\nkind: Database\nmetadata: {name: a}\n", 20)
	small = lim
	small.MaxDocuments = 10
	_, err = manifest.Parse(manifest.Source{Name: "many.yaml", Data: []byte(many)}, small)
	require.ErrorContains(t, err, "more than 10 documents")
}

// TestInputThatIsNotUTF8IsRefusedBeforeParsing: the prescan's byte
// counts hold for UTF-8 only, so UTF-16 (which the YAML library would
// decode) and NUL bytes are refused first.
func TestInputThatIsNotUTF8IsRefusedBeforeParsing(t *testing.T) {
	for _, data := range [][]byte{
		append([]byte{0xFF, 0xFE}, []byte("k\x00i\x00n\x00d\x00")...),
		append([]byte{0xFE, 0xFF}, []byte("\x00k\x00i\x00n\x00d")...),
		[]byte("kind: Database\nmetadata: {name: a\x00}\n"),
	} {
		_, err := manifest.Parse(manifest.Source{Name: "u.yaml", Data: data}, manifest.DefaultLimits)
		require.ErrorContains(t, err, "u.yaml: not UTF-8 text")
	}
}

// TestAFolderIsBoundedAsAWholeBeforeAnyFileIsParsed: the prescanned
// values of every file of a Load count together, and are counted before
// the first file is parsed (here the first one is not even valid YAML).
func TestAFolderIsBoundedAsAWholeBeforeAnyFileIsParsed(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("kind: [\n"), 0o600))
	list := "kind: Database\nmetadata: {name: a}\nspec: {x: [" + strings.Repeat("1,", 400) + "1]}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(list), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(strings.ReplaceAll(list, "name: a", "name: c")), 0o600))
	lim := manifest.DefaultLimits
	lim.MaxTotalValues = 1500 // each file alone is under it (about 820), not all of them
	_, err := manifest.Load(dir, nil, lim)
	require.ErrorContains(t, err, dir+": more than 1500 values together; apply fewer files at once")
	lim.MaxTotalValues = 2000
	_, err = manifest.Load(dir, nil, lim)
	require.ErrorContains(t, err, "a.yaml, document 1: not valid YAML or JSON")
}

func TestLoadFolderInNameOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	write("20-b.yaml", "kind: Database\nmetadata: {name: b}\n")
	write("10-a.json", `{"kind":"Database","metadata":{"name":"a"}}`)
	write("30-c.yml", "kind: Database\nmetadata: {name: c}\n")
	write("README.md", "not a manifest")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	write("sub/x.yaml", "kind: Database\nmetadata: {name: x}\n")
	docs, err := manifest.Load(dir, nil, manifest.DefaultLimits)
	require.NoError(t, err)
	var names []string
	for _, d := range docs {
		names = append(names, d.Metadata.Name)
	}
	assert.Equal(t, []string{"a", "b", "c"}, names)
	assert.Equal(t, filepath.Join(dir, "20-b.yaml"), docs[1].Source)

	docs, err = manifest.Load("-", strings.NewReader("kind: Database\nmetadata: {name: s}\n"), manifest.DefaultLimits)
	require.NoError(t, err)
	assert.Equal(t, "stdin", docs[0].Source)

	_, err = manifest.Load(t.TempDir(), nil, manifest.DefaultLimits)
	require.ErrorContains(t, err, "no manifest files")
	_, err = manifest.Load("-", strings.NewReader("# nothing\n"), manifest.DefaultLimits)
	require.ErrorContains(t, err, "stdin: no documents")
}

func TestBundle(t *testing.T) {
	const good = `kind: Bundle
metadata: {name: shop}
spec:
  resources:
  - name: orders
    object: {kind: Database, metadata: {namespace: prod}, spec: {size: 10}}
  - name: snap
    object:
      kind: VolumeSnapshot
      metadata: {name: snap-a, annotations: {lethe.io/deletion-delay: 1h}}
`
	docs, err := parse(t, good)
	require.NoError(t, err)
	b, err := manifest.ParseBundle(docs[0])
	require.NoError(t, err)
	require.Len(t, b.Members, 2)
	assert.Equal(t, catalog.Key{Kind: "Database", Namespace: "prod", Name: "orders"}, b.Members[0].Doc.Key(), "the member name stands in for metadata.name")
	assert.Equal(t, "snap-a", b.Members[1].Doc.Metadata.Name)

	for _, tc := range []struct{ name, spec, want string }{
		{"twice", "resources: [{name: a, object: {kind: D}}, {name: a, object: {kind: D}}]", `spec.resources[1].name: member "a" appears twice`},
		{"invalid member", "resources: [{name: a, object: {kind: D, metadata: {labels: {x: 'a b'}}}}]", `spec.resources[0].object.metadata.labels["x"]: invalid label value`},
		{"bad delay", "resources: [{name: a, object: {kind: D, metadata: {annotations: {lethe.io/deletion-delay: 3 days}}}}]", `spec.resources[0].object.metadata.annotations["lethe.io/deletion-delay"]: invalid duration`},
		{"same resource", "resources: [{name: a, object: {kind: D, metadata: {name: x}}}, {name: b, object: {kind: D, metadata: {name: x}}}]", `spec.resources[1].object: D/x is also member spec.resources[0]`},
		{"nested", "resources: [{name: a, object: {kind: Bundle, spec: {resources: []}}}]", `spec.resources[0].object.kind: a bundle cannot hold a bundle`},
		{"no object", "resources: [{name: a}]", `spec.resources[0].object: required`},
		{"unknown", "resources: []\nextra: 1", `spec.extra: unknown field`},
		{"bad member name", "resources: [{name: A_1, object: {kind: D}}]", `spec.resources[0].name: invalid name "A_1"`},
		{"no resources", "{}", `spec.resources: required`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := parse(t, "kind: Bundle\nmetadata: {name: shop}\nspec:\n  "+strings.ReplaceAll(tc.spec, "\n", "\n  "))
			require.NoError(t, err)
			_, err = manifest.ParseBundle(docs[0])
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "m.yaml, document 1 (Bundle/shop)")
		})
	}
}

// TestLetheSetFieldsAreTakenAndListed: the parser takes what lethe get
// prints of a resource pending deletion (the deletion-scheduled-at
// annotation, lethe.io/ finalizers), keeps them in the document, and
// SetByLethe names each, so that apply can compare them with the stored
// resource; a user's own finalizers are not among them.
func TestLetheSetFieldsAreTakenAndListed(t *testing.T) {
	ds, err := parse(t, "kind: Database\nmetadata:\n  name: a\n  annotations: {lethe.io/deletion-scheduled-at: '2026-01-02T03:04:05Z', team: db}\n  finalizers: [example.com/drain, lethe.io/cascade]\n")
	require.NoError(t, err)
	d := ds[0]
	assert.Equal(t, []string{"example.com/drain", catalog.FinalizerCascade}, d.Metadata.Finalizers)
	assert.Equal(t, []manifest.LetheField{
		{Field: `metadata.annotations["lethe.io/deletion-scheduled-at"]`, Annotation: catalog.AnnotationDeletionScheduledAt, Value: "2026-01-02T03:04:05Z"},
		{Field: "metadata.finalizers[1]", Finalizer: catalog.FinalizerCascade},
	}, d.SetByLethe())
	ds, err = parse(t, "kind: Database\nmetadata: {name: a, finalizers: [example.com/drain], annotations: {lethe.io/deletion-delay: 1h}}\n")
	require.NoError(t, err)
	assert.Empty(t, ds[0].SetByLethe())
	_, err = parse(t, "kind: Database\nmetadata: {name: a, finalizers: [lethe.io/cascade, lethe.io/cascade]}\n")
	assert.ErrorContains(t, err, `finalizer "lethe.io/cascade" appears twice`)
}

// A reference with peer: is a forward edge to another catalog, not one
// of the resource's own references; the same target locally and on a peer
// are two references, and a resource may reference its namesake on a peer.
func TestPeerReferencesAreKeptApartFromLocalOnes(t *testing.T) {
	docs, err := parse(t, ("kind: App\nmetadata: {name: web, namespace: shop}\nreferences:\n" +
		"- {kind: Database, namespace: shop, name: orders, onTargetDelete: block}\n" +
		"- {kind: Database, namespace: shop, name: orders, peer: eu, onTargetDelete: cascade}\n" +
		"- {kind: App, namespace: shop, name: web, peer: eu, onTargetDelete: allowDangling}\n"))
	require.NoError(t, err)
	require.Len(t, docs, 1)
	d := docs[0]
	require.Equal(t, []catalog.Reference{{Kind: "Database", Namespace: "shop", Name: "orders", OnTargetDelete: catalog.RefBlock}}, d.Resource().References)
	peers := d.PeerReferences()
	require.Len(t, peers, 2)
	require.Equal(t, "eu", peers[0].Peer)
	require.Equal(t, catalog.Key{Kind: "Database", Namespace: "shop", Name: "orders"}, peers[0].Target)
	require.Equal(t, catalog.RefCascade, peers[0].OnTargetDelete)
	require.Equal(t, catalog.ObjectRef{Kind: "App", Namespace: "shop", Name: "web"}, peers[0].Referrer)
	require.Equal(t, catalog.Key{Kind: "App", Namespace: "shop", Name: "web"}, peers[1].Target)
}
