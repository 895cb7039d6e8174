package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"
)

// Limits bound what one Load reads, so that hostile input costs little.
type Limits struct {
	// MaxFileBytes caps one file (or stdin).
	MaxFileBytes int64
	// MaxTotalBytes caps all files of a folder together.
	MaxTotalBytes int64
	// MaxFiles caps the manifest files of a folder.
	MaxFiles int
	// MaxDocuments caps the documents of one Load, List items included.
	MaxDocuments int
	// MaxDepth caps how deeply values nest inside a document.
	MaxDepth int
	// MaxValues caps the values of one file, counted twice: as an upper
	// bound from the raw bytes before any parsing (prescan), then as
	// built, aliases expanded (a "billion laughs" document expands to
	// far more).
	MaxValues int
	// MaxDocumentValues caps the values of one document the same two
	// ways. The YAML library holds one document's node tree at a time,
	// so this bounds the memory of a Load; MaxValues bounds its time.
	MaxDocumentValues int
	// MaxTotalValues caps the prescanned values of all the files of one
	// Load together (a folder, several -f), checked before any is parsed.
	MaxTotalValues int
}

// DefaultLimits are generous for real manifests.
var DefaultLimits = Limits{
	MaxFileBytes:  8 << 20,
	MaxTotalBytes: 64 << 20,
	MaxFiles:      10_000,
	MaxDocuments:  100_000,
	MaxDepth:      64,
	MaxValues:     3_000_000,
	// About 25 MiB of node tree at most (the library's nodes take about
	// 230 bytes each).
	MaxDocumentValues: 100_000,
	// About 2 s of CPU to parse, at worst.
	MaxTotalValues: 5_000_000,
}

// Source is one named input: a file, or stdin ("-").
type Source struct {
	Name string
	Data []byte
}

// Extensions are the file name endings a folder is read for.
var Extensions = []string{".yaml", ".yml", ".json"}

// Read reads path: a file, a folder (its .yaml, .yml and .json files, not
// recursively, in name order) or "-" for stdin.
func Read(path string, stdin io.Reader, lim Limits) ([]Source, error) {
	if path == "-" {
		b, err := readCapped(stdin, lim.MaxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("stdin: %w", err)
		}
		return []Source{{Name: "stdin", Data: b}}, nil
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such file or folder", path)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		b, err := readFile(path, lim.MaxFileBytes)
		if err != nil {
			return nil, err
		}
		return []Source{{Name: path, Data: b}}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []Source
	var total int64
	for _, e := range entries { // os.ReadDir sorts by name
		if e.IsDir() || !slices.Contains(Extensions, strings.ToLower(filepath.Ext(e.Name()))) {
			continue
		}
		if len(out) == lim.MaxFiles {
			return nil, fmt.Errorf("%s: more than %d manifest files", path, lim.MaxFiles)
		}
		p := filepath.Join(path, e.Name())
		b, err := readFile(p, lim.MaxFileBytes)
		if err != nil {
			return nil, err
		}
		if total += int64(len(b)); total > lim.MaxTotalBytes {
			return nil, fmt.Errorf("%s: manifests larger than %d bytes together", path, lim.MaxTotalBytes)
		}
		out = append(out, Source{Name: p, Data: b})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no manifest files (%s) in this folder", path, strings.Join(Extensions, ", "))
	}
	return out, nil
}

// readFile reads the regular file at path. It opens it without blocking:
// opening a FIFO (a named pipe called x.yaml) for reading would otherwise
// wait for a writer for ever; it is refused instead, as is anything else
// that is not a regular file.
func readFile(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file; refusing to read it", path)
	}
	b, err := readCapped(f, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

func readCapped(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

// raw is one document before validation: its value as JSON-shaped Go
// data (map[string]any, []any, string, float64/int64, bool, nil).
type raw struct {
	index int // 1-based within the source
	line  int
	value any
}

// decode splits a source into documents and hands each to fn as soon as
// it is converted, so that only one document's values are held at a time.
// YAML streams (---) and JSON (one value, or several) are both read as
// YAML, which JSON is a subset of. A document that is a sequence, or a
// mapping of kind List, stands for its items. The source is prescanned
// first: nothing is parsed from a source whose bound is over the limits.
func decode(src Source, lim Limits, fn func(raw) error) error {
	if _, err := prescan(src, lim); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(src.Data))
	c := &converter{lim: lim}
	count := 0
	for n := 1; ; n++ {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &Error{Source: src.Name, Index: n, Msg: "not valid YAML or JSON: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		c.inDoc = 0
		v, err := c.value(&node, 0)
		if err != nil {
			return &Error{Source: src.Name, Index: n, Line: c.line, Msg: err.Error()}
		}
		if v == nil {
			continue // an empty document (a trailing ---)
		}
		items := []any{v}
		if l, ok := v.([]any); ok {
			items = l
		} else if m, ok := v.(map[string]any); ok && IsList(m) {
			l, ok := m["items"].([]any)
			for k := range m {
				if k != "kind" && k != "items" && k != "apiVersion" {
					ok = false
				}
			}
			if av, has := m["apiVersion"]; has && av != APIVersion {
				return &Error{Source: src.Name, Index: n, Line: node.Line, Field: "apiVersion", Msg: fmt.Sprintf("want %s (or leave it out)", APIVersion)}
			}
			if !ok {
				return &Error{Source: src.Name, Index: n, Line: node.Line, Field: "items", Msg: "a List has apiVersion, kind: List (or KindList) and items: [...] only"}
			}
			items = l
		}
		for i, it := range items {
			if count++; count > lim.MaxDocuments {
				return &Error{Source: src.Name, Index: n, Msg: fmt.Sprintf("more than %d documents", lim.MaxDocuments)}
			}
			if err := fn(raw{index: n, line: node.Line, value: it}); err != nil {
				return err
			}
			items[i] = nil // validated: let it go
		}
	}
}

// converter turns YAML nodes into JSON-shaped values within the limits.
type converter struct {
	lim    Limits
	values int // in the source
	inDoc  int // in the current document
	line   int // of the node that failed
}

func (c *converter) value(n *yaml.Node, depth int) (any, error) {
	c.line = n.Line
	if depth > c.lim.MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", c.lim.MaxDepth)
	}
	if c.values++; c.values > c.lim.MaxValues {
		return nil, fmt.Errorf("more than %d values once aliases are expanded", c.lim.MaxValues)
	}
	if c.inDoc++; c.inDoc > c.lim.MaxDocumentValues {
		return nil, fmt.Errorf("more than %d values in one document once aliases are expanded", c.lim.MaxDocumentValues)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return c.value(n.Content[0], depth)
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, errors.New("alias to nothing")
		}
		return c.value(n.Alias, depth+1)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := c.value(e, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				c.line = k.Line
				return nil, errors.New("a mapping key must be a plain value")
			}
			if k.ShortTag() == "!!merge" {
				c.line = k.Line
				return nil, errors.New("merge keys (<<) are not supported")
			}
			if _, dup := out[k.Value]; dup {
				c.line = k.Line
				return nil, fmt.Errorf("key %q appears twice", k.Value)
			}
			val, err := c.value(v, depth+1)
			if err != nil {
				return nil, err
			}
			out[k.Value] = val
		}
		return out, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!str", "!!timestamp", "!!binary":
			return n.Value, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, err
			}
			return b, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err != nil {
				return nil, fmt.Errorf("integer %q out of range", n.Value)
			}
			return i, nil
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fmt.Errorf("number %q is not representable in JSON", n.Value)
			}
			return f, nil
		}
		return nil, fmt.Errorf("unsupported tag %s", n.Tag)
	}
	return nil, fmt.Errorf("unsupported YAML node")
}

// toJSON encodes a converted value.
func toJSON(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	return b, err
}
