package manifest_test

import (
	"testing"

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
