package manifest_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/lethehq/lethe/internal/manifest"
)

// FuzzParse: any input is either documents that validate or one error
// line; never a panic, never an unbounded amount of work.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte(`[{"kind":"Database","metadata":{"name":"a"}}]`))
	f.Add([]byte("kind: Bundle\nmetadata: {name: b}\nspec: {resources: [{name: a, object: {kind: D}}]}"))
	f.Add([]byte("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]"))
	f.Add([]byte("kind: List\nitems: [{kind: D, metadata: {name: a}}]"))
	lim := manifest.DefaultLimits
	lim.MaxValues = 100_000
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := manifest.Parse(manifest.Source{Name: "f.yaml", Data: data}, lim)
		if err != nil {
			if docs != nil {
				t.Fatal("documents with an error")
			}
			for _, c := range err.Error() {
				if c == '\n' {
					t.Fatalf("error of several lines: %q", err)
				}
			}
			return
		}
		for _, d := range docs {
			if d.Kind == "" || d.Metadata.Name == "" {
				t.Fatalf("accepted a document without kind or name: %+v", d)
			}
			if d.Kind == manifest.KindBundle {
				_, _ = manifest.ParseBundle(d)
			}
		}
	})
}

// FuzzPrescanBoundsTheNodeTree: the count made from the raw bytes before
// parsing is never below the number of nodes the YAML library builds for
// a document. With the limit one below a document's real count, the
// prescan itself (its own message) must refuse the input: an undercount
// would let the library build a tree the limits do not bound.
func FuzzPrescanBoundsTheNodeTree(f *testing.F) {
	for _, s := range prescanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		most := 0
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var n yaml.Node
			err := dec.Decode(&n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return // not YAML: nothing is built
			}
			most = max(most, countNodes(&n))
		}
		if most < 2 {
			return
		}
		lim := manifest.DefaultLimits
		lim.MaxDocumentValues = most - 1
		_, err := manifest.Parse(manifest.Source{Name: "f.yaml", Data: data}, lim)
		if err == nil || !strings.Contains(err.Error(), "values in one document; split it") {
			t.Fatalf("a document of %d nodes passed the prescan with a limit of %d: %v\n%q", most, lim.MaxDocumentValues, err, data)
		}
	})
}

// countNodes counts the nodes of a document's tree (aliases once each, as
// the library builds them).
func countNodes(n *yaml.Node) int {
	c := 1
	if n.Kind == yaml.DocumentNode {
		c = 0
	}
	for _, k := range n.Content {
		c += countNodes(k)
	}
	return c
}

var prescanSeeds = []string{
	example,
	`[{"kind":"Database","metadata":{"name":"a"}}]`,
	`{"a":1,"b":[1,2,{"c":null}],"d":"x:y"}`,
	"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]",
	"{a, b, c}", "{a, b: , ? c}", "[a: b, c: d]", "[? a, ? b : c]", "[,]", "[a,]",
	"- - - - x", "-\n-\n-\n", "- \n- \n", "? a\n? b\n: c\n", "?\n:\n",
	"a:\nb:\nc:\n", ":\n:\n", "a: b: c", "- a: 1\n  b: 2\n- c:\n  - d\n",
	"a: |\n  x, y, z\n  [1, 2]\nb: >-\n  w\n",
	"a: 'it''s, [1, 2]'\nb: \"q\\\" [1,2]\"\n",
	"a: x # [1, 2, 3]\nb: [1, # c\n 2]\n",
	"-\u0085-\u0085-\u0085", "- a\u2028- b\u2029- c",
	"!!map {!!str a: !!seq [!!int 1]}", "&x a: *x", "--- a\n--- b\n...\n--- [1,2]\n",
	"a: [1, [2, [3, [4]]]]\nb: {c: {d: {e: f}}}", "\"a\" : 1", "'a':1", "{\"a\":1}", "[\"a\":1]",
	"a:\t1\nb:\t[1,\t2]", "\t- x", "%YAML 1.2\n---\na: 1\n",
}
