package s3test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy stands between a client and a Server: it counts the requests, and
// can cut a download short, answer 503 Slow Down, or fail every request
// for a while, to test how a client copes with a flaky network and a
// failing server. Requests keep their Host header, so the
// client's signatures stay valid.
type Proxy struct {
	// URL is the Server's blobstore URL with the proxy as its endpoint.
	URL string

	mu       sync.Mutex
	backend  *url.URL
	gets     []string  // Range header of each GET of an object ("" for all of it)
	lists    int       // listings (ListObjectsV2 pages)
	cutAfter []int64   // cut the next GETs' bodies after so many bytes
	unavail  int       // answer the next so many ranged GETs with 503
	failTill time.Time // answer every request with an error until then
	failed   int       // requests answered so by failTill
}

// failures are the answers of FailUntil, in turn: what S3 answers when it
// is broken, overloaded or throttling.
var failures = []struct {
	status int
	code   string
}{
	{http.StatusInternalServerError, "InternalError"},
	{http.StatusServiceUnavailable, "ServiceUnavailable"},
	{http.StatusServiceUnavailable, "SlowDown"},
}

// NewProxy starts a proxy in front of s, stopped when the test ends.
func NewProxy(t testing.TB, s *Server) *Proxy {
	t.Helper()
	be, err := url.Parse(s.Endpoint)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	p := &Proxy{backend: be}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(srv.Close)
	p.URL = strings.Replace(s.URL, url.QueryEscape(s.Endpoint), url.QueryEscape(srv.URL), 1)
	if p.URL == s.URL {
		t.Fatalf("s3test: endpoint %s not found in %s", s.Endpoint, s.URL)
	}
	return p
}

// CutNextGETs makes the next len(after) GETs of an object break after
// after[i] bytes of body: the connection is closed mid-stream.
func (p *Proxy) CutNextGETs(after ...int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAfter = append(p.cutAfter, after...)
}

// UnavailableOnResume makes the next n ranged GETs of an object (those
// that resume a download) answer 503 Slow Down.
func (p *Proxy) UnavailableOnResume(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unavail += n
}

// FailUntil makes every request, of any kind, answer 500 InternalError,
// 503 ServiceUnavailable or 503 SlowDown (in turn) until t.
func (p *Proxy) FailUntil(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failTill = t
}

// Failed returns how many requests FailUntil answered with an error.
func (p *Proxy) Failed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// GETs returns the Range header of every GET of an object so far, in
// order ("" for a GET of the whole object), 503s included.
func (p *Proxy) GETs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.gets...)
}

// Reset forgets the GETs counted so far.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gets = nil
	p.lists = 0
}

// LISTs returns the number of listing requests (one per page of up to
// 1,000 keys) so far.
func (p *Proxy) LISTs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lists
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	// A GET of an object: path /bucket/key (path-style), not a listing.
	object := r.Method == http.MethodGet && strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1 && !r.URL.Query().Has("list-type")
	cut := int64(-1)
	p.mu.Lock()
	if time.Now().Before(p.failTill) {
		f := failures[p.failed%len(failures)]
		p.failed++
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(f.status)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>`+f.code+`</Code><Message>injected by s3test.Proxy</Message></Error>`)
		return
	}
	unavailable := false
	if r.URL.Query().Has("list-type") {
		p.lists++
	}
	if object {
		p.gets = append(p.gets, r.Header.Get("Range"))
		switch {
		case p.unavail > 0 && r.Header.Get("Range") != "":
			p.unavail--
			unavailable = true
		case len(p.cutAfter) > 0:
			cut = p.cutAfter[0]
			p.cutAfter = p.cutAfter[1:]
		}
	}
	p.mu.Unlock()
	if unavailable {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.backend.Scheme, p.backend.Host
	out.Host = r.Host // signed by the client
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if cut < 0 {
		_, _ = io.Copy(w, resp.Body)
		return
	}
	_, _ = io.CopyN(w, resp.Body, cut)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	panic(http.ErrAbortHandler) // closes the connection mid-body
}
