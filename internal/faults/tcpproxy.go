package faults

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// TCPProxy forwards TCP connections from a loopback port to a backend
// address. Cut closes every open connection and refuses (accepts and
// closes at once) every new one until Restore; Stall is a partition that
// heals: nothing is forwarded, on open connections or new ones, and
// nothing is lost, until Restore (as TCP's retransmissions carry a
// connection over a short partition); SetLatency delays every chunk
// forwarded, in each direction, by half the given round-trip time.
type TCPProxy struct {
	// Addr is the proxy's listening address, 127.0.0.1:PORT.
	Addr string

	backend string
	ln      net.Listener
	wg      sync.WaitGroup

	mu      sync.Mutex
	cut     bool
	stall   chan struct{} // while stalled: closed by Restore
	latency time.Duration
	conns   map[*link]struct{}
	closed  bool

	accepted atomic.Int64
	refused  atomic.Int64
	severed  atomic.Int64
}

type link struct{ client, server net.Conn }

func (l *link) close() {
	_ = l.client.Close()
	_ = l.server.Close()
}

// NewTCPProxy listens on a free loopback port and forwards to backend.
func NewTCPProxy(backend string) (*TCPProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &TCPProxy{Addr: ln.Addr().String(), backend: backend, ln: ln, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Cut closes every forwarded connection and refuses new ones until
// Restore.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	links := p.conns
	p.conns = map[*link]struct{}{}
	p.mu.Unlock()
	for l := range links {
		p.severed.Add(1)
		l.close()
	}
}

// Stall holds every byte, on open connections and new ones, until
// Restore.
func (p *TCPProxy) Stall() {
	p.mu.Lock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
	p.mu.Unlock()
}

// Restore ends a cut or a stall: new connections are forwarded, and what
// a stall held goes through.
func (p *TCPProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
	p.mu.Unlock()
}

// held returns the channel to wait on while stalled, or nil.
func (p *TCPProxy) held() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stall
}

// SetLatency delays every chunk by rtt/2 in each direction (0: none).
func (p *TCPProxy) SetLatency(rtt time.Duration) {
	p.mu.Lock()
	p.latency = rtt
	p.mu.Unlock()
}

// Stats returns how many connections were forwarded, refused while cut,
// and severed by Cut.
func (p *TCPProxy) Stats() (accepted, refused, severed int64) {
	return p.accepted.Load(), p.refused.Load(), p.severed.Load()
}

// Close stops listening and closes every connection.
func (p *TCPProxy) Close() error {
	p.Restore() // release what a stall holds
	p.mu.Lock()
	p.closed = true
	links := p.conns
	p.conns = map[*link]struct{}{}
	p.mu.Unlock()
	err := p.ln.Close()
	for l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

func (p *TCPProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut, closed := p.cut, p.closed
		p.mu.Unlock()
		if cut || closed {
			p.refused.Add(1)
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *TCPProxy) serve(c net.Conn) {
	defer p.wg.Done()
	if ch := p.held(); ch != nil {
		<-ch // a partition: the connection waits, unanswered
	}
	s, err := net.DialTimeout("tcp", p.backend, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		p.refused.Add(1)
		l.close()
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()
	p.accepted.Add(1)
	var done sync.WaitGroup
	done.Add(2)
	go func() { defer done.Done(); p.pipe(s, c) }()
	go func() { defer done.Done(); p.pipe(c, s) }()
	done.Wait()
	l.close()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// pipe copies from src to dst; with a latency, each chunk is written
// rtt/2 after it was read, in order, without holding up the reads.
func (p *TCPProxy) pipe(dst, src net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 256)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		p.mu.Lock()
		d := p.latency / 2
		p.mu.Unlock()
		if wait := time.Until(ch.at.Add(d)); wait > 0 {
			time.Sleep(wait)
		}
		if h := p.held(); h != nil {
			<-h
		}
		if _, err := dst.Write(ch.b); err != nil {
			break
		}
	}
	// One side ended: end both, so that the other pipe's Read returns.
	_ = src.Close()
	_ = dst.Close()
	for range q { //nolint:revive // drain the reader so it can exit
	}
}
