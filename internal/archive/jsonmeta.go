package archive

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
)

// objectMeta is what the Reader needs from an item's JSON. Its byte slices
// alias the body unless the JSON escaped them.
type objectMeta struct {
	apiVersion, kind, name, namespace []byte
	labels                            map[string]string
}

// maxJSONDepth matches encoding/json's nesting limit.
const maxJSONDepth = 10000

// jsonError is a syntax or shape error at a byte offset.
type jsonError struct {
	off int
	msg string
}

func (e *jsonError) Error() string { return e.msg + " at offset " + strconv.Itoa(e.off) }

// parseMeta checks that b is exactly one valid JSON object (RFC 8259, as
// strict as encoding/json) and extracts apiVersion, kind and
// metadata.{name,namespace,labels}, with labels only when wantLabels.
//
// It is a single pass that allocates nothing but the labels: encoding/json
// scans every byte twice and was the Reader's bottleneck. Keys match exactly
// (case-sensitive, as Kubernetes' decoder does), and a repeated key among
// those it extracts is an error, so that no other parser can read a
// different name or namespace out of the same bytes.
func parseMeta(b []byte, wantLabels bool) (objectMeta, error) {
	var p metaParser
	return p.parse(b, wantLabels)
}

// parse is parseMeta reusing p's buffers.
func (p *metaParser) parse(b []byte, wantLabels bool) (objectMeta, error) {
	*p = metaParser{b: b, wantLabels: wantLabels, spans: p.spans[:0]}
	var m objectMeta
	p.ws()
	if p.i >= len(b) || b[p.i] != '{' {
		if err := p.value(0); err != nil {
			return m, err
		}
		p.ws()
		if p.i < len(b) {
			return m, p.errf("invalid character " + strconv.QuoteRune(rune(b[p.i])) + " after top-level value")
		}
		return m, errors.New("the item is not a JSON object")
	}
	if err := p.topObject(&m); err != nil {
		return m, err
	}
	p.ws()
	if p.i < len(b) {
		return m, p.errf("invalid character " + strconv.QuoteRune(rune(b[p.i])) + " after top-level value")
	}
	return m, nil
}

type metaParser struct {
	b          []byte
	i          int
	wantLabels bool
	spans      []strSpan // label keys and values, see labels
	lastStr    strSpan   // the last string str read
}

func (p *metaParser) errf(msg string) error { return &jsonError{off: p.i, msg: msg} }

func (p *metaParser) unexpected() error {
	if p.i >= len(p.b) {
		return p.errf("unexpected end of JSON input")
	}
	return p.errf("invalid character " + strconv.QuoteRune(rune(p.b[p.i])))
}

func (p *metaParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// object iterates the members of an object starting at '{', calling member
// with each key (unescaped) while positioned at the value.
func (p *metaParser) object(depth int, member func(key []byte) error) error {
	if depth >= maxJSONDepth {
		return p.errf("exceeded max depth")
	}
	p.i++ // '{'
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return p.unexpected()
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return p.unexpected()
		}
		p.i++
		p.ws()
		if err := member(key); err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.b) {
			return p.unexpected()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.ws()
		case '}':
			p.i++
			return nil
		default:
			return p.unexpected()
		}
	}
}

// strField reads a string or null value into *dst, once.
func (p *metaParser) strField(dst *[]byte, seen *bool, name string) error {
	if *seen {
		return p.errf("duplicate key " + strconv.Quote(name))
	}
	*seen = true
	if p.i < len(p.b) && p.b[p.i] == 'n' {
		return p.value(1)
	}
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		if err := p.value(1); err != nil {
			return err
		}
		return errors.New(name + " is not a string")
	}
	s, err := p.str()
	*dst = s
	return err
}

func (p *metaParser) topObject(m *objectMeta) error {
	var seenAPI, seenKind, seenMeta bool
	return p.object(0, func(key []byte) error {
		switch string(key) {
		case "apiVersion":
			return p.strField(&m.apiVersion, &seenAPI, "apiVersion")
		case "kind":
			return p.strField(&m.kind, &seenKind, "kind")
		case "metadata":
			return p.objectField(&seenMeta, "metadata", 1, func() error { return p.metadata(m) })
		}
		return p.value(1)
	})
}

// objectField reads the value of a key that must hold an object (or null):
// read parses the object; a repeated key or any other value is an error.
func (p *metaParser) objectField(seen *bool, name string, depth int, read func() error) error {
	if *seen {
		return p.errf(`duplicate key "` + name + `"`)
	}
	*seen = true
	if p.i < len(p.b) && p.b[p.i] == '{' {
		return read()
	}
	if p.i < len(p.b) && p.b[p.i] == 'n' {
		return p.value(depth)
	}
	if err := p.value(depth); err != nil {
		return err
	}
	return errors.New(name + " is not an object")
}

func (p *metaParser) metadata(m *objectMeta) error {
	var seenName, seenNS, seenLabels bool
	return p.object(1, func(key []byte) error {
		switch string(key) {
		case "name":
			return p.strField(&m.name, &seenName, "metadata.name")
		case "namespace":
			return p.strField(&m.namespace, &seenNS, "metadata.namespace")
		case "labels":
			return p.objectField(&seenLabels, "metadata.labels", 2, func() error { return p.labels(m) })
		}
		return p.value(2)
	})
}

// labels reads metadata.labels. Keys and values that need no unescaping
// become substrings of one string copied from the body: one allocation for
// all of them, plus the map.
func (p *metaParser) labels(m *objectMeta) error {
	start := p.i
	p.spans = p.spans[:0]
	err := p.object(2, func(key []byte) error {
		keySpan := p.lastStr
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			if err := p.value(3); err != nil {
				return err
			}
			return errors.New("label " + strconv.Quote(string(key)) + " is not a string")
		}
		if _, err := p.str(); err != nil || !p.wantLabels {
			return err
		}
		p.spans = append(p.spans, keySpan, p.lastStr)
		return nil
	})
	if err != nil || len(p.spans) == 0 {
		return err
	}
	all := string(p.b[start:p.i])
	m.labels = make(map[string]string, len(p.spans)/2)
	for i := 0; i < len(p.spans); i += 2 {
		m.labels[p.spans[i].in(all, start)] = p.spans[i+1].in(all, start)
	}
	return nil
}

// strSpan locates a string read by str: its content is b[off:off+n], or dec
// when it had escapes.
type strSpan struct {
	off, n int
	dec    []byte
}

// in returns the span's content as a substring of all, which holds the body
// from offset base.
func (s strSpan) in(all string, base int) string {
	if s.dec != nil {
		return string(s.dec)
	}
	return all[s.off-base : s.off-base+s.n]
}

// value validates and skips one value at depth.
func (p *metaParser) value(depth int) error {
	if p.i >= len(p.b) {
		return p.unexpected()
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth, func([]byte) error { return p.value(depth + 1) })
	case c == '[':
		if depth >= maxJSONDepth {
			return p.errf("exceeded max depth")
		}
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return nil
		}
		for {
			if err := p.value(depth + 1); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.b) {
				return p.unexpected()
			}
			switch p.b[p.i] {
			case ',':
				p.i++
				p.ws()
			case ']':
				p.i++
				return nil
			default:
				return p.unexpected()
			}
		}
	case c == '"':
		_, err := p.skipStr()
		return err
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	}
	return p.unexpected()
}

func (p *metaParser) lit(s string) error {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return nil
	}
	for j := 0; j < len(s); j++ {
		if p.i >= len(p.b) || p.b[p.i] != s[j] {
			return p.unexpected()
		}
		p.i++
	}
	return nil
}

func (p *metaParser) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

func (p *metaParser) number() error {
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.i < len(p.b) && p.b[p.i] >= '1' && p.b[p.i] <= '9':
		p.digits()
	default:
		return p.unexpected()
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return p.unexpected()
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return p.unexpected()
		}
	}
	return nil
}

// skipStr validates the string at p.i ('"') and moves past it. It reports
// whether the string holds escapes.
func (p *metaParser) skipStr() (escaped bool, err error) {
	p.i++
	for p.i < len(p.b) {
		// Skip 8 plain bytes at a time (no '"', '\\' or control byte).
		for p.i+8 <= len(p.b) {
			x := binary.LittleEndian.Uint64(p.b[p.i:])
			if hasLess(x, 0x20)|hasZero(x^(lsb*'"'))|hasZero(x^(lsb*'\\')) != 0 {
				break
			}
			p.i += 8
		}
		if p.i >= len(p.b) {
			break
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return escaped, nil
		case c == '\\':
			escaped = true
			p.i++
			if p.i >= len(p.b) {
				return escaped, p.unexpected()
			}
			switch p.b[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				p.i++
				for range 4 {
					if p.i >= len(p.b) || !isHex(p.b[p.i]) {
						return escaped, p.unexpected()
					}
					p.i++
				}
			default:
				return escaped, p.unexpected()
			}
		case c < 0x20:
			return escaped, p.unexpected()
		default:
			p.i++
		}
	}
	return escaped, p.unexpected()
}

// str reads the string at p.i and returns its content, unescaped (a new
// slice) if it holds escapes, else aliasing the body.
func (p *metaParser) str() ([]byte, error) {
	start := p.i
	escaped, err := p.skipStr()
	if err != nil {
		return nil, err
	}
	if !escaped {
		p.lastStr = strSpan{off: start + 1, n: p.i - start - 2}
		return p.b[start+1 : p.i-1], nil
	}
	var s string
	if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
		return nil, err
	}
	p.lastStr = strSpan{dec: []byte(s)}
	return p.lastStr.dec, nil
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// hasZero reports (as non-zero) whether any byte of x is zero; hasLess
// whether any is below n (n <= 128). Exact for "any", per Bit Twiddling Hacks.
func hasZero(x uint64) uint64    { return (x - lsb) &^ x & msb }
func hasLess(x, n uint64) uint64 { return (x - lsb*n) &^ x & msb }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
