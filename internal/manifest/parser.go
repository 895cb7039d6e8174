package manifest

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// parser fills a Document, keeping the first error.
type parser struct {
	d   *Document
	err *Error
}

func (p *parser) fail(field, format string, args ...any) {
	if p.err == nil {
		p.err = p.d.Errorf(field, format, args...)
		p.err.Line = p.d.Line
	}
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// object checks that v is a mapping with only the allowed keys.
func (p *parser) object(v any, field string, allowed ...string) map[string]any {
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(field, "want a mapping, got %s", typeName(v))
		return nil
	}
	if !anyKey(m, func(k string, _ any) bool { return !slices.Contains(allowed, k) }) {
		return m
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, k) {
			hint := ""
			switch k {
			case "uid", "creationTimestamp", "deletionTimestamp", "generation", "managedFields":
				hint = " (set by Lethe, not by a manifest)"
			}
			p.fail(join(field, k), "unknown field%s; allowed: %s", hint, strings.Join(allowed, ", "))
			return nil
		}
	}
	return m
}

func (p *parser) str(m map[string]any, key, field string, required bool) string {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			p.fail(join(field, key), "required")
		}
		return ""
	}
	s, ok := v.(string)
	if !ok {
		p.fail(join(field, key), "want a string, got %s", typeName(v))
	}
	return s
}

func (p *parser) strMap(m map[string]any, key, field string) map[string]string {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	mm, ok := v.(map[string]any)
	if !ok {
		p.fail(join(field, key), "want a mapping of strings, got %s", typeName(v))
		return nil
	}
	out := make(map[string]string, len(mm))
	if !anyKey(mm, func(_ string, v any) bool { _, ok := v.(string); return !ok }) {
		for k, v := range mm {
			out[k] = v.(string)
		}
		return out
	}
	for _, k := range slices.Sorted(maps.Keys(mm)) {
		s, ok := mm[k].(string)
		if !ok {
			p.fail(fmt.Sprintf("%s[%q]", join(field, key), k), "want a string, got %s (quote it)", typeName(mm[k]))
			return nil
		}
		out[k] = s
	}
	return out
}

// anyKey reports whether bad holds for any entry of m. The checks of a
// mapping go through its keys in order, for the first error to be the
// same every time, only when one fails: a valid document sorts nothing
// (an 8 MiB file is 55,000 documents of several mappings each).
func anyKey[V any](m map[string]V, bad func(k string, v V) bool) bool {
	for k, v := range m {
		if bad(k, v) {
			return true
		}
	}
	return false
}

func (p *parser) list(m map[string]any, key, field string) []any {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		p.fail(join(field, key), "want a list, got %s", typeName(v))
	}
	return l
}

var kindRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

func validKind(k string) bool { return len(k) <= 63 && kindRE.MatchString(k) }

const kindHelp = "a kind is an upper-case letter, then letters and digits (e.g. VolumeSnapshot)"

func nameErr(name string) string {
	if len(name) > 253 {
		return fmt.Sprintf("invalid name (%d characters): a name has at most 253", len(name))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Sprintf("invalid name %q: use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit", name)
	}
	return ""
}

func namespaceErr(ns string) string {
	if len(ns) > 63 {
		return fmt.Sprintf("invalid namespace (%d characters): a namespace has at most 63", len(ns))
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Sprintf("invalid namespace %q: use lowercase letters, digits and '-', starting and ending with a letter or digit", ns)
	}
	return ""
}
