package blobstore

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// ErrSlowRead is returned by a read from an s3:// endpoint that sends
// fewer than S3Timeouts.MinReadBytes in a whole S3Timeouts.ReadWindow: an
// endpoint that drips bytes (or none) would hold a sync for ever. Such a
// read is not resumed.
var ErrSlowRead = errors.New("blobstore: the endpoint sends too slowly")

// S3Timeouts bound the HTTP exchanges with an s3:// endpoint. Zero fields
// take the defaults.
type S3Timeouts struct {
	// ResponseHeaderTimeout bounds the wait for a response's headers.
	ResponseHeaderTimeout time.Duration
	// ReadWindow and MinReadBytes: a response body that delivers fewer
	// than MinReadBytes in a ReadWindow is cut (ErrSlowRead).
	ReadWindow   time.Duration
	MinReadBytes int64
}

// Default S3 timeouts: a minute for the headers; at least 1 KiB every two
// minutes of a body.
const (
	DefaultResponseHeaderTimeout = time.Minute
	DefaultReadWindow            = 2 * time.Minute
	DefaultMinReadBytes          = 1024
)

func (t S3Timeouts) withDefaults() S3Timeouts {
	if t.ResponseHeaderTimeout <= 0 {
		t.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if t.ReadWindow <= 0 {
		t.ReadWindow = DefaultReadWindow
	}
	if t.MinReadBytes <= 0 {
		t.MinReadBytes = DefaultMinReadBytes
	}
	return t
}

// slowReadTransport cuts response bodies that are too slow.
type slowReadTransport struct {
	next http.RoundTripper
	t    S3Timeouts
}

func (s *slowReadTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	resp.Body = newWatchedBody(resp.Body, s.t)
	return resp, nil
}

// watchedBody is a response body whose reads are timed: once the time
// spent waiting in Read adds up to a window with fewer than the minimum
// bytes in it, the body is closed (unblocking a Read) and every Read fails
// with ErrSlowRead. Only time inside Read counts: a reader that stops to
// work (a plugin call between two items) is not taken for a slow endpoint.
type watchedBody struct {
	rc      io.ReadCloser
	t       S3Timeouts
	mu      sync.Mutex
	n       int64         // bytes in the current window
	busy    time.Duration // time inside Read in the current window, finished reads
	started time.Time     // start of the Read in progress
	slow    bool
	timer   *time.Timer
}

func newWatchedBody(rc io.ReadCloser, t S3Timeouts) *watchedBody {
	return &watchedBody{rc: rc, t: t}
}

// settle adds the time of the Read in progress up to now, and ends the
// window once it is full; it says whether the endpoint was too slow.
func (b *watchedBody) settle(now time.Time) bool {
	b.busy += now.Sub(b.started)
	b.started = now
	if b.busy < b.t.ReadWindow {
		return false
	}
	if b.n < b.t.MinReadBytes {
		return true
	}
	b.n, b.busy = 0, 0
	return false
}

func (b *watchedBody) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started.IsZero() || b.slow {
		return // the Read returned meanwhile
	}
	if b.settle(time.Now()) {
		b.slow = true
		_ = b.rc.Close()
		return
	}
	b.timer.Reset(b.t.ReadWindow - b.busy)
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.slow {
		b.mu.Unlock()
		return 0, b.slowErr()
	}
	b.started = time.Now()
	if b.timer == nil {
		b.timer = time.AfterFunc(b.t.ReadWindow-b.busy, b.fire)
	} else {
		b.timer.Reset(b.t.ReadWindow - b.busy)
	}
	b.mu.Unlock()
	n, err := b.rc.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer.Stop()
	b.n += int64(n)
	if !b.slow && b.settle(time.Now()) {
		b.slow = true
	}
	b.started = time.Time{}
	if b.slow {
		return n, b.slowErr()
	}
	return n, err
}

func (b *watchedBody) slowErr() error {
	return fmt.Errorf("%w: fewer than %d bytes in %s of reading", ErrSlowRead, b.t.MinReadBytes, b.t.ReadWindow)
}

func (b *watchedBody) Close() error {
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	return b.rc.Close()
}
