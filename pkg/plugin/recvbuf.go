package plugin

import (
	"math/bits"
	"strings"
	"sync/atomic"
)

// recvPool holds the buffers an execution receives item batches into. A
// batch's items are decoded in place: their objects alias the buffer, and
// the buffer is used again for a later batch once every item of the batch
// is finished (Execute returned, or the item never ran). That is the
// contract of Item.Object: the action owns it for the duration of Execute
// and must not retain it. The SDK sets Object to nil when it releases an
// item. The item's strings never alias the buffer: the repeated ones
// (group, version, resource, kind, namespace) are interned, names are
// copied, so an action may keep them. Used by the receiving goroutine
// only, except recvBuf.release.
type recvPool struct {
	free  chan *recvBuf
	strs  map[string]string
	names []byte // the chunk names are copied into; never written again
}

// recvBuf is one batch's bytes. refs counts its items not yet released.
type recvBuf struct {
	b    []byte
	refs atomic.Int32
	pool *recvPool
}

const (
	// maxFreeRecvBufs bounds the buffers kept for reuse.
	maxFreeRecvBufs = 4
	// maxRecvInterned bounds the strings a pool interns.
	maxRecvInterned = 4096
	nameChunk       = 16 << 10
)

func newRecvPool() *recvPool {
	return &recvPool{free: make(chan *recvBuf, maxFreeRecvBufs), strs: map[string]string{}}
}

// get returns a buffer of n bytes.
func (p *recvPool) get(n int) *recvBuf {
	for {
		select {
		case rb := <-p.free:
			if cap(rb.b) < n {
				continue // too small: the collector frees it
			}
			rb.b = rb.b[:n]
			return rb
		default:
			// Rounded up to a power of two, so that the buffer fits most
			// later batches, whose sizes vary; not past 2 MiB (a batch is
			// at most about 1 MiB of items: larger ones are rare).
			c := n
			if n <= 1<<21 {
				c = 1 << bits.Len(uint(max(n, 1)-1))
			}
			return &recvBuf{b: make([]byte, n, c), pool: p}
		}
	}
}

// release drops one item's reference to rb, and keeps rb for reuse once
// none is left.
func (rb *recvBuf) release() {
	if rb.refs.Add(-1) != 0 {
		return
	}
	select {
	case rb.pool.free <- rb:
	default:
	}
}

// intern returns s (which may alias a receive buffer) as a string of its
// own, shared with the earlier items that had the same one.
func (p *recvPool) intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := p.strs[s]; ok {
		return v
	}
	if len(p.strs) >= maxRecvInterned {
		return p.copy(s)
	}
	v := strings.Clone(s)
	p.strs[v] = v
	return v
}

// copy returns s as a string of its own, carved from a shared chunk.
func (p *recvPool) copy(s string) string {
	if len(s) > nameChunk/8 {
		return strings.Clone(s)
	}
	if cap(p.names)-len(p.names) < len(s) {
		p.names = make([]byte, 0, nameChunk)
	}
	l := len(p.names)
	p.names = append(p.names, s...)
	return aliasString(p.names[l:len(p.names):len(p.names)])
}
