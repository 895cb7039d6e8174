package archive

import "sync/atomic"

// bodies carves item bodies out of shared chunks, like slab, and takes a
// chunk back once every body carved from it has been handed back through
// Reader.Recycle, to carve the next bodies from it: a deletion that
// recycles what it is done with reads the tarball through a few chunks
// instead of allocating one per 60 items. The ownership rule: a body is
// its item's until the item is recycled, and is never written while a
// reference counts it; a chunk is written again only once its count is
// zero. A body that is never recycled keeps its chunk out of reuse, and
// the chunk is freed by the garbage collector as before.
type bodies struct {
	cur  *bodyChunk
	off  int
	free chan *bodyChunk
}

// bodyChunk is a chunk of bodies. refs counts the bodies carved from it
// and not recycled, plus one while it is the chunk being carved.
type bodyChunk struct {
	buf  []byte
	refs atomic.Int32
}

// maxFreeChunks bounds the recycled chunks kept for reuse (4 MiB).
const maxFreeChunks = 64

func newBodies() bodies { return bodies{free: make(chan *bodyChunk, maxFreeChunks)} }

// carve returns n bytes for one body, and the chunk that counts it (nil
// for a body too large to share a chunk, which is allocated alone).
func (b *bodies) carve(n int) ([]byte, *bodyChunk) {
	if n > slabMax {
		return make([]byte, n), nil
	}
	if b.cur == nil || len(b.cur.buf)-b.off < n {
		if b.cur != nil {
			b.put(b.cur) // the carver's reference
		}
		select {
		case b.cur = <-b.free:
		default:
			b.cur = &bodyChunk{buf: make([]byte, slabChunk)}
		}
		b.cur.refs.Store(1)
		b.off = 0
	}
	c := b.cur
	c.refs.Add(1)
	out := c.buf[b.off : b.off+n : b.off+n]
	b.off += n
	return out, c
}

// put drops one reference to c, and keeps c for reuse once none is left.
func (b *bodies) put(c *bodyChunk) {
	if c.refs.Add(-1) != 0 {
		return
	}
	select {
	case b.free <- c:
	default: // enough kept: the collector frees it
	}
}

// Recycle hands it's body back to the reader, to be overwritten by a later
// item's: the caller must hold no reference to it.Object, nor to any slice
// of it, any more (strings of the item are not affected: they never alias
// its body). It sets it.Object to nil. Recycling is optional, and safe
// from another goroutine than the one calling Next; recycling an item
// twice, or one this reader did not return, does nothing.
func (r *Reader) Recycle(it *Item) {
	c := it.chunk
	if c == nil || it.from != r {
		return
	}
	it.chunk, it.from, it.Object = nil, nil, nil
	r.bodies.put(c)
}
