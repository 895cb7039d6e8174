package archive

// keySet remembers which (item, directory) pairs a tarball has held, in 16
// bytes per distinct item and without keeping any key.
//
// An item is identified by a 96-bit fingerprint of its key (group-resource,
// namespace, name): h1, a 64-bit hash that also places it in the table, and
// h2, a second, independent 32-bit hash. Both come from hash/maphash with
// seeds drawn at random per Reader, so a crafted tarball cannot aim for a
// collision. mask has bit 0 set once the unversioned item was seen and bit i
// once its copy in the i-th version directory of its group-resource was.
//
// What a collision could do, and why it is harmless:
//   - Two distinct keys sharing a fingerprint make the second look like a
//     duplicate of the first: the tarball is rejected with ErrDuplicate, a
//     clear error, never a silent skip. Odds for n items: about n²/2^97.
//   - A versioned copy is skipped only when the fingerprint of its key
//     matches an unversioned item's. For a copy whose own item is missing
//     (Velero writes none such, bar races), a collision would skip it: odds
//     about n/2^96 per such copy, 1e-23 for a million items.
//   - When the copy came first and is still held, the keys are compared in
//     full, so a collision there is detected and rejected.
type keySet struct {
	slots []slot
	n     int
	mask  uint64 // len(slots)-1
}

type slot struct {
	h1   uint64
	h2   uint32
	bits uint32 // zero means the slot is empty
}

const keySetMinSize = 1 << 10

// get returns the slot of (h1, h2), inserting an empty one (bits == 0) if it
// is absent; the caller must then set a bit. The pointer is valid until the
// next call.
func (s *keySet) get(h1 uint64, h2 uint32) *slot {
	if 4*(s.n+1) > 3*len(s.slots) {
		s.grow()
	}
	for i := h1 & s.mask; ; i = (i + 1) & s.mask {
		sl := &s.slots[i]
		if sl.bits == 0 {
			sl.h1, sl.h2 = h1, h2
			s.n++
			return sl
		}
		if sl.h1 == h1 && sl.h2 == h2 {
			return sl
		}
	}
}

func (s *keySet) grow() {
	size := max(2*len(s.slots), keySetMinSize)
	old := s.slots
	s.slots = make([]slot, size)
	s.mask = uint64(size - 1)
	for _, sl := range old {
		if sl.bits == 0 {
			continue
		}
		i := sl.h1 & s.mask
		for s.slots[i].bits != 0 {
			i = (i + 1) & s.mask
		}
		s.slots[i] = sl
	}
}
