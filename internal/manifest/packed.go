package manifest

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"iter"

	"github.com/lethehq/lethe/internal/catalog"
)

// Packed is the validated documents of one or several Loads, packed into
// bytes without pointers, and unpacked one at a time, in order, as they
// are used. An 8 MiB file of small manifests is 55,000 documents: as
// Documents, with their label maps, about 40 MiB that the garbage
// collector scans on every cycle; packed, about 7 MiB that it never
// scans. Every document is validated when it is packed (LoadPacked), so a
// bad file is refused before any is used, as with Load.
// The zero Packed is empty and ready to use.
type Packed struct {
	blocks  [][]byte
	sources []string
	n       int
	scratch []byte   // Add's, reused
	in      interner // At's
}

// packBlock is the size of the blocks documents are packed into: growing
// one slice would copy it, and hold two copies, at each doubling.
const packBlock = 1 << 20

// Load is Load into p: the documents of path are packed after p's, in
// order. On an error (the first invalid document) p holds only some of
// them: discard it.
func (p *Packed) Load(path string, stdin io.Reader, lim Limits) error {
	return loadEach(path, stdin, lim, func(d *Document) error {
		p.Add(d)
		return nil
	})
}

// Len is how many documents p holds.
func (p *Packed) Len() int { return p.n }

// Add packs d after p's documents and returns its position, for At.
func (p *Packed) Add(d *Document) int {
	src := -1
	for i, s := range p.sources {
		if s == d.Source {
			src = i
			break
		}
	}
	if src < 0 {
		src = len(p.sources)
		p.sources = append(p.sources, d.Source)
	}
	w := packWriter{b: p.scratch[:0]}
	w.str(d.Kind) // first: OfKind reads only the kind
	w.int(src)
	w.int(d.Index)
	w.int(d.Line)
	w.str(d.Field)
	w.str(d.Container)
	md := &d.Metadata
	w.str(md.Name)
	w.str(md.Namespace)
	w.strMap(md.Labels)
	w.strMap(md.Annotations)
	w.count(len(md.OwnerReferences), md.OwnerReferences == nil)
	for _, o := range md.OwnerReferences {
		w.str(o.Kind)
		w.str(o.Name)
		w.str(o.UID)
		w.bool(o.BlockOwnerDeletion)
	}
	w.count(len(md.Finalizers), md.Finalizers == nil)
	for _, f := range md.Finalizers {
		w.str(f)
	}
	w.b = binary.AppendVarint(w.b, md.ResourceVersion)
	w.count(len(d.References), d.References == nil)
	for _, r := range d.References {
		w.str(r.Kind)
		w.str(r.Namespace)
		w.str(r.Name)
		w.str(r.Peer)
		w.str(string(r.OnTargetDelete))
	}
	w.bytes(d.Spec)
	w.bytes(d.Status)
	p.scratch = w.b
	// Each document is its length, then its fields: OfKind skips one
	// without unpacking it.
	need := binary.MaxVarintLen64 + len(w.b)
	n := len(p.blocks)
	if n == 0 || cap(p.blocks[n-1])-len(p.blocks[n-1]) < need {
		p.blocks = append(p.blocks, make([]byte, 0, max(packBlock, need)))
		n++
	}
	pos := (n-1)<<32 | len(p.blocks[n-1])
	blk := binary.AppendVarint(p.blocks[n-1], int64(len(w.b)))
	p.blocks[n-1] = append(blk, w.b...)
	p.n++
	return pos
}

// At unpacks the document Add packed at pos.
func (p *Packed) At(pos int) *Document {
	if p.in == nil {
		p.in = interner{}
	}
	rec, _ := next(p.blocks[pos>>32][pos&(1<<32-1):])
	r := packReader{b: rec, in: p.in}
	return r.document(p.sources)
}

// All unpacks p's documents in order, each a new Document that the
// caller may keep or change; p keeps its packed copy.
func (p *Packed) All() iter.Seq[*Document] { return p.each(false) }

// Drain is All, letting each block of p go once its documents are
// unpacked: p is empty afterwards (even if the loop stops early).
func (p *Packed) Drain() iter.Seq[*Document] { return p.each(true) }

func (p *Packed) each(drain bool) iter.Seq[*Document] {
	return func(yield func(*Document) bool) {
		in := interner{}
		if drain {
			defer func() { p.blocks, p.n = nil, 0 }()
		}
		for i, b := range p.blocks {
			if drain {
				p.blocks[i] = nil
			}
			for len(b) > 0 {
				var rec []byte
				rec, b = next(b)
				r := packReader{b: rec, in: in}
				if !yield(r.document(p.sources)) {
					return
				}
			}
		}
	}
}

// OfKind unpacks only p's documents of kind kind.
func (p *Packed) OfKind(kind string) []*Document {
	var out []*Document
	in := interner{}
	for _, b := range p.blocks {
		for len(b) > 0 {
			var rec []byte
			rec, b = next(b)
			r := packReader{b: rec, in: in}
			if string(r.raw()) != kind {
				continue
			}
			r.b = rec
			out = append(out, r.document(p.sources))
		}
	}
	return out
}

// next splits the first packed document off b.
func next(b []byte) (rec, rest []byte) {
	v, k := binary.Varint(b)
	n := int(v)
	return b[k : k+n], b[k+n:]
}

type packWriter struct{ b []byte }

func (w *packWriter) int(v int) { w.b = binary.AppendVarint(w.b, int64(v)) }
func (w *packWriter) str(s string) {
	w.int(len(s))
	w.b = append(w.b, s...)
}

func (w *packWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

// count writes a length, or 0 for nil (a present length is n+1): nil and
// empty unpack as they were packed.
func (w *packWriter) count(n int, isNil bool) {
	if isNil {
		w.int(0)
	} else {
		w.int(n + 1)
	}
}

func (w *packWriter) strMap(m map[string]string) {
	w.count(len(m), m == nil)
	for k, v := range m {
		w.str(k)
		w.str(v)
	}
}

func (w *packWriter) bytes(b []byte) {
	w.count(len(b), b == nil)
	w.b = append(w.b, b...)
}

// interner shares the strings that repeat from document to document
// (kinds, namespaces, label keys and values): a plan of tens of thousands
// of resources holds each once.
type interner map[string]string

// internMax: longer strings, and strings past this many, are not shared.
const (
	internMax   = 64
	internCount = 4096
)

type packReader struct {
	b  []byte
	in interner
}

func (r *packReader) int() int {
	v, n := binary.Varint(r.b)
	r.b = r.b[n:]
	return int(v)
}

func (r *packReader) raw() []byte {
	n := r.int()
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// str unpacks a string, shared when it is short (see interner).
func (r *packReader) str() string {
	b := r.raw()
	if len(b) == 0 {
		return ""
	}
	if len(b) > internMax {
		return string(b)
	}
	if s, ok := r.in[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(r.in) < internCount {
		r.in[s] = s
	}
	return s
}

// own unpacks a string that is rarely shared (a name, a uid).
func (r *packReader) own() string { return string(r.raw()) }

func (r *packReader) count() (int, bool) {
	n := r.int()
	if n == 0 {
		return 0, true
	}
	return n - 1, false
}

func (r *packReader) strMap() map[string]string {
	n, isNil := r.count()
	if isNil {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := r.str()
		m[k] = r.str()
	}
	return m
}

func (r *packReader) bytes() json.RawMessage {
	n, isNil := r.count()
	if isNil {
		return nil
	}
	b := make(json.RawMessage, n)
	copy(b, r.b[:n])
	r.b = r.b[n:]
	return b
}

func (r *packReader) document(sources []string) *Document {
	d := &Document{Kind: r.str()}
	d.Source = sources[r.int()]
	d.Index = r.int()
	d.Line = r.int()
	d.Field = r.str()
	d.Container = r.str()
	md := &d.Metadata
	md.Name = r.own()
	md.Namespace = r.str()
	md.Labels = r.strMap()
	md.Annotations = r.strMap()
	if n, isNil := r.count(); !isNil {
		md.OwnerReferences = make([]OwnerReference, n)
		for i := range n {
			o := &md.OwnerReferences[i]
			o.Kind, o.Name, o.UID = r.str(), r.own(), r.own()
			o.BlockOwnerDeletion = r.b[0] == 1
			r.b = r.b[1:]
		}
	}
	if n, isNil := r.count(); !isNil {
		md.Finalizers = make([]string, n)
		for i := range n {
			md.Finalizers[i] = r.str()
		}
	}
	rv, k := binary.Varint(r.b)
	r.b = r.b[k:]
	md.ResourceVersion = rv
	if n, isNil := r.count(); !isNil {
		d.References = make([]Reference, n)
		for i := range n {
			x := &d.References[i]
			x.Kind, x.Namespace, x.Name, x.Peer = r.str(), r.str(), r.own(), r.str()
			x.OnTargetDelete = catalog.OnTargetDelete(r.str())
		}
	}
	d.Spec = r.bytes()
	d.Status = r.bytes()
	return d
}
