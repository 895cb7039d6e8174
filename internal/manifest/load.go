package manifest

import (
	"fmt"
	"io"
)

// Load reads path (a file, a folder, or "-" for stdin) and returns every
// document, validated, in order. The first invalid document fails the
// whole load.
func Load(path string, stdin io.Reader, lim Limits) ([]*Document, error) {
	var out []*Document
	if err := loadEach(path, stdin, lim, func(d *Document) error {
		out = append(out, d)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// loadEach reads path as Load does and hands each validated document to
// fn as soon as it is built; fn may keep it or let it go. An error (the
// first invalid document) comes after fn has seen the documents before
// it.
func loadEach(path string, stdin io.Reader, lim Limits, fn func(*Document) error) error {
	srcs, err := Read(path, stdin, lim)
	if err != nil {
		return err
	}
	// Every source is prescanned before any is parsed: the bound of the
	// whole input comes first.
	total := 0
	for _, src := range srcs {
		n, err := prescan(src, lim)
		if err != nil {
			return err
		}
		if total += n; total > lim.MaxTotalValues {
			return fmt.Errorf("%s: more than %d values together; apply fewer files at once", sourceName(path), lim.MaxTotalValues)
		}
	}
	count := 0
	for i, src := range srcs {
		err := decode(src, lim, func(r raw) error {
			d, err := FromValue(src.Name, r.index, r.line, "", r.value)
			if err != nil {
				return err
			}
			if count++; count > lim.MaxDocuments {
				return fmt.Errorf("%s: more than %d documents", path, lim.MaxDocuments)
			}
			return fn(d)
		})
		if err != nil {
			return err
		}
		srcs[i].Data = nil // parsed: let it go
	}
	if count == 0 {
		return fmt.Errorf("%s: no documents", sourceName(path))
	}
	return nil
}

func sourceName(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}

// Parse decodes and validates the documents of one source.
func Parse(src Source, lim Limits) ([]*Document, error) {
	var out []*Document
	err := decode(src, lim, func(r raw) error {
		d, err := FromValue(src.Name, r.index, r.line, "", r.value)
		if err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// FromValue validates one decoded document (JSON-shaped data) found at
// field of document index of source.
func FromValue(source string, index, line int, field string, v any) (*Document, error) {
	d := &Document{Source: source, Index: index, Line: line, Field: field}
	p := &parser{d: d}
	p.document(v)
	if p.err != nil {
		return nil, p.err
	}
	if d.Kind == KindRetentionPolicy {
		if _, err := ParseRetentionPolicy(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}
