package archive

import "unsafe"

// slab carves small byte slices (item bodies, entry names) out of shared
// chunks: one allocation per chunk instead of one per item, and no
// rounding up to a size class. Each carved slice is capped and never
// written again by the slab, so it is its owner's; a chunk is freed once
// nothing carved from it is referenced.
type slab struct{ buf []byte }

const (
	slabChunk = 64 << 10
	// slabMax is the largest slice carved; larger ones are allocated
	// alone.
	slabMax = slabChunk / 8
)

func (s *slab) bytes(n int) []byte {
	if n > slabMax {
		return make([]byte, n)
	}
	if cap(s.buf)-len(s.buf) < n {
		s.buf = make([]byte, 0, slabChunk)
	}
	l := len(s.buf)
	s.buf = s.buf[:l+n]
	return s.buf[l : l+n : l+n]
}

// string returns b's bytes as a string carved from the slab.
func (s *slab) string(b ...[]byte) string {
	n := 0
	for _, p := range b {
		n += len(p)
	}
	if n == 0 {
		return ""
	}
	out := s.bytes(n)
	k := 0
	for _, p := range b {
		k += copy(out[k:], p)
	}
	return unsafe.String(&out[0], n) //nolint:gosec // G103: out is a fresh slab region, never written again
}
