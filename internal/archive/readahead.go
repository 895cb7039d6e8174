package archive

import (
	"io"
	"sync"
)

// readAhead decompresses on its own goroutine, a few chunks ahead of the
// reader, so that decompression (a third of the work) runs on another core
// than tar and JSON parsing. It holds at most readAheadChunks chunks, so the
// caps, checked as chunks are consumed, are overrun by at most that much.
//
// The goroutine ends at the stream's end or error, or on stop; the Reader
// stops it on Close, on its own final error or EOF, and through a cleanup if
// it is dropped unclosed mid-stream.
type readAhead struct {
	full chan chunk
	free chan []byte
	done chan struct{}
	once sync.Once
	// exited is closed once the goroutine has returned and closed the
	// decompressor; only then may the caller touch dec's source again.
	exited chan struct{}

	cur  []byte // unread part of buf
	buf  []byte
	err  error
	last bool
}

type chunk struct {
	b   []byte
	err error
}

const (
	readAheadChunks    = 4
	readAheadChunkSize = 128 << 10
)

// startReadAhead reads dec on a new goroutine; closeDec, if set, runs when
// the goroutine ends, on that goroutine.
func startReadAhead(dec io.Reader, closeDec func()) *readAhead {
	ra := &readAhead{
		full:   make(chan chunk, readAheadChunks),
		free:   make(chan []byte, readAheadChunks),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	for range readAheadChunks {
		ra.free <- make([]byte, readAheadChunkSize)
	}
	go ra.run(dec, closeDec)
	return ra
}

func (ra *readAhead) run(dec io.Reader, closeDec func()) {
	defer close(ra.exited)
	if closeDec != nil {
		defer closeDec()
	}
	for {
		var buf []byte
		select {
		case buf = <-ra.free:
		case <-ra.done:
			return
		}
		n, err := fill(dec, buf)
		select {
		case ra.full <- chunk{b: buf[:n], err: err}:
		case <-ra.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// fill reads into buf until it is full or dec fails; unlike io.ReadFull it
// passes dec's error through unchanged, so io.EOF still means a clean end.
func fill(dec io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := dec.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
		if m == 0 {
			// A reader returning 0, nil repeatedly would spin; io.Reader
			// discourages it, and the decompressors never do it for long.
			continue
		}
	}
	return n, nil
}

func (ra *readAhead) Read(p []byte) (int, error) {
	for len(ra.cur) == 0 {
		if ra.last {
			return 0, ra.err
		}
		if ra.buf != nil {
			ra.free <- ra.buf[:cap(ra.buf)]
			ra.buf = nil
		}
		c := <-ra.full
		ra.buf, ra.cur = c.b, c.b
		if c.err != nil {
			ra.err, ra.last = c.err, true
		}
	}
	n := copy(p, ra.cur)
	ra.cur = ra.cur[n:]
	return n, nil
}

func (ra *readAhead) stop() { ra.once.Do(func() { close(ra.done) }) }
