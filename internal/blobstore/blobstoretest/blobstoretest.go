package blobstoretest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"path"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore"
)

// LargeObjectSize is the size of the object the streaming test writes and
// reads back.
const LargeObjectSize = 128 << 20

// largeObjectHeapBudget is how much the live heap may grow while the large
// object streams through a store: half of the object, so buffering it whole
// fails. A store's own buffers must be bounded and independent of the
// object's size (s3:// holds about 40 MiB per Put; see blobstore.OpenConfig).
const largeObjectHeapBudget = LargeObjectSize / 2

// Run runs the conformance suite. newURL returns the URL of a fresh, empty
// location for each call; the suite derives sub-locations from it by
// appending path segments, so for s3:// it must be a prefix in a bucket that
// already exists, and for file:// a directory.
//
// The subtests do not run in parallel: the streaming test measures the heap
// of the whole process.
func Run(t *testing.T, newURL func(t *testing.T) string) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, base string)
	}{
		{"PutOpenStat", testPutOpenStat},
		{"EmptyObject", testEmptyObject},
		{"NotFound", testNotFound},
		{"Overwrite", testOverwrite},
		{"PinnedOpen", testPinnedOpen},
		{"Delete", testDelete},
		{"List", testList},
		{"PrefixIsolation", testPrefixIsolation},
		{"InvalidKey", testInvalidKey},
		{"AtomicPutFailingReader", testAtomicPutFailingReader},
		{"AtomicPutCanceledContext", testAtomicPutCanceledContext},
		{"AtomicPutKeepsOldObject", testAtomicPutKeepsOldObject},
		{"LargeObjectStreams", testLargeObjectStreams},
		{"URLHasNoCredentials", testURLHasNoCredentials},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newURL(t)) })
	}
}

// open opens rawURL and closes the store when the test ends.
func open(t *testing.T, rawURL string) blobstore.Store {
	t.Helper()
	s, err := blobstore.Open(t.Context(), rawURL)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// child returns base with name appended to its path.
func child(t *testing.T, base, name string) string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = path.Join("/", u.Path, name)
	return u.String()
}

func put(t *testing.T, s blobstore.Store, key, body string) {
	t.Helper()
	require.NoError(t, s.Put(t.Context(), key, strings.NewReader(body)), "put %q", key)
}

func read(t *testing.T, s blobstore.Store, key string) string {
	t.Helper()
	r, err := s.Open(t.Context(), key)
	require.NoError(t, err, "open %q", key)
	defer func() { require.NoError(t, r.Close()) }()
	b, err := io.ReadAll(r)
	require.NoError(t, err, "read %q", key)
	return string(b)
}

func keys(t *testing.T, s blobstore.Store, prefix string) []string {
	t.Helper()
	attrs, err := s.List(t.Context(), prefix)
	require.NoError(t, err)
	out := []string{}
	for _, a := range attrs {
		out = append(out, a.Key)
	}
	return out
}

func requireNotFound(t *testing.T, s blobstore.Store, key string) {
	t.Helper()
	_, err := s.Stat(t.Context(), key)
	require.ErrorIs(t, err, blobstore.ErrNotFound, "stat %q", key)
}

func testPutOpenStat(t *testing.T, base string) {
	s := open(t, base)
	const key, body = "backups/b1/b1.tar.gz", "some tarball bytes"
	before := time.Now()
	put(t, s, key, body)
	require.Equal(t, body, read(t, s, key))

	a, err := s.Stat(t.Context(), key)
	require.NoError(t, err)
	require.Equal(t, key, a.Key)
	require.EqualValues(t, len(body), a.Size)
	// Only a sanity bound: the server's clock and ours may differ a little,
	// and stores may keep seconds only.
	require.WithinRange(t, a.ModTime, before.Add(-time.Hour), time.Now().Add(time.Hour))

	// A partly read object can be closed early.
	r, err := s.Open(t.Context(), key)
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(r, buf)
	require.NoError(t, err)
	require.Equal(t, body[:4], string(buf))
	require.NoError(t, r.Close())
}

func testEmptyObject(t *testing.T, base string) {
	s := open(t, base)
	put(t, s, "empty", "")
	require.Empty(t, read(t, s, "empty"))
	a, err := s.Stat(t.Context(), "empty")
	require.NoError(t, err)
	require.Zero(t, a.Size)
	require.Equal(t, []string{"empty"}, keys(t, s, ""))
}

func testNotFound(t *testing.T, base string) {
	s := open(t, base)
	put(t, s, "dir/present", "x")
	for _, key := range []string{"missing", "dir", "dir/missing", "dir/present/below"} {
		_, err := s.Open(t.Context(), key)
		require.ErrorIs(t, err, blobstore.ErrNotFound, "open %q", key)
		require.Contains(t, err.Error(), key)
		_, err = s.Stat(t.Context(), key)
		require.ErrorIs(t, err, blobstore.ErrNotFound, "stat %q", key)
		err = s.Delete(t.Context(), key)
		require.ErrorIs(t, err, blobstore.ErrNotFound, "delete %q", key)
	}
	require.Equal(t, []string{"dir/present"}, keys(t, s, ""))
	attrs, err := s.List(t.Context(), "nothing-here/")
	require.NoError(t, err)
	require.Empty(t, attrs)
}

func testOverwrite(t *testing.T, base string) {
	s := open(t, base)
	put(t, s, "k", "first version, longer")
	put(t, s, "k", "second")
	require.Equal(t, "second", read(t, s, "k"))
	a, err := s.Stat(t.Context(), "k")
	require.NoError(t, err)
	require.EqualValues(t, len("second"), a.Size)
	require.Equal(t, []string{"k"}, keys(t, s, ""))
}

// testPinnedOpen: an object put in the place of another of the same size
// has another Version, and a read pinned to the first one is refused
// before any byte is read; the zero Version pins nothing.
func testPinnedOpen(t *testing.T, base string) {
	s := open(t, base)
	ctx := t.Context()
	const key = "backups/p/p.tar.gz"
	put(t, s, key, "registered bytes")
	first, err := s.Stat(ctx, key)
	require.NoError(t, err)
	require.False(t, first.Version.IsZero(), "Stat reports the object's identity")
	require.True(t, first.Version.Matches(first.Version))
	rc, err := s.OpenVersion(ctx, key, first.Version)
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, "registered bytes", string(got))

	put(t, s, key, "an impostor same")
	second, err := s.Stat(ctx, key)
	require.NoError(t, err)
	require.Equal(t, first.Size, second.Size)
	require.False(t, first.Version.Matches(second.Version), "same size, another object: %s vs %s", first.Version, second.Version)
	_, err = s.OpenVersion(ctx, key, first.Version)
	require.ErrorIs(t, err, blobstore.ErrVersionMismatch)
	require.Contains(t, err.Error(), key)
	rc, err = s.OpenVersion(ctx, key, second.Version)
	require.NoError(t, err)
	got, err = io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, "an impostor same", string(got))
	require.Equal(t, "an impostor same", func() string {
		rc, err := s.OpenVersion(ctx, key, blobstore.Version{})
		require.NoError(t, err)
		defer rc.Close()
		b, err := io.ReadAll(rc)
		require.NoError(t, err)
		return string(b)
	}())
	_, err = s.OpenVersion(ctx, "missing", first.Version)
	require.ErrorIs(t, err, blobstore.ErrNotFound)
}

func testDelete(t *testing.T, base string) {
	s := open(t, base)
	put(t, s, "a/one", "1")
	put(t, s, "a/two", "2")
	require.NoError(t, s.Delete(t.Context(), "a/one"))
	requireNotFound(t, s, "a/one")
	_, err := s.Open(t.Context(), "a/one")
	require.ErrorIs(t, err, blobstore.ErrNotFound)
	require.Equal(t, []string{"a/two"}, keys(t, s, ""))
	require.ErrorIs(t, s.Delete(t.Context(), "a/one"), blobstore.ErrNotFound)
	require.Equal(t, "2", read(t, s, "a/two"))
}

func testList(t *testing.T, base string) {
	s := open(t, base)
	bodies := map[string]string{
		"b/x":         "xx",
		"b/y/z":       "zzz",
		"bb":          "bbbb",
		"c.tar.gz":    "ccccc",
		"a/deep/er/k": "kkkkkk",
	}
	// Put in an order that is not the sorted one.
	for _, k := range []string{"c.tar.gz", "b/y/z", "bb", "a/deep/er/k", "b/x"} {
		put(t, s, k, bodies[k])
	}
	attrs, err := s.List(t.Context(), "")
	require.NoError(t, err)
	got := map[string]int64{}
	var order []string
	for _, a := range attrs {
		got[a.Key] = a.Size
		order = append(order, a.Key)
		require.False(t, a.ModTime.IsZero(), "mod time of %q", a.Key)
	}
	require.Equal(t, []string{"a/deep/er/k", "b/x", "b/y/z", "bb", "c.tar.gz"}, order)
	for k, size := range got {
		require.EqualValues(t, len(bodies[k]), size, "size of %q", k)
	}

	require.Equal(t, []string{"b/x", "b/y/z", "bb"}, keys(t, s, "b"))
	require.Equal(t, []string{"b/x", "b/y/z"}, keys(t, s, "b/"))
	require.Equal(t, []string{"b/y/z"}, keys(t, s, "b/y"))
	require.Equal(t, []string{"a/deep/er/k"}, keys(t, s, "a/de"))
	require.Empty(t, keys(t, s, "d"))
}

func testPrefixIsolation(t *testing.T, base string) {
	parent := open(t, base)
	a := open(t, child(t, base, "a"))
	ab := open(t, child(t, base, "ab"))
	nested := open(t, child(t, base, "a/n"))

	put(t, a, "k", "from a")
	put(t, ab, "k", "from ab")
	put(t, nested, "k", "from a/n")

	require.Equal(t, "from a", read(t, a, "k"))
	require.Equal(t, "from ab", read(t, ab, "k"))
	require.Equal(t, []string{"k", "n/k"}, keys(t, a, ""))
	require.Equal(t, []string{"k"}, keys(t, ab, ""))
	require.Equal(t, []string{"a/k", "a/n/k", "ab/k"}, keys(t, parent, ""))
	require.Equal(t, "from a/n", read(t, parent, "a/n/k"))

	require.NoError(t, ab.Delete(t.Context(), "k"))
	require.Equal(t, "from a", read(t, a, "k"))
	requireNotFound(t, ab, "k")
	requireNotFound(t, ab, "n/k")
}

func testInvalidKey(t *testing.T, base string) {
	s := open(t, base)
	put(t, s, "ok", "x")
	for _, key := range []string{
		"", "/abs", "trailing/", "a//b", "../up", "a/../b", "./a", "a/.",
		"ctl\x00", "ctl\nline", "bad\xffutf8", "x.attrs", "x.tar.gz.18a2b3c4d5e6f.tmp",
		strings.Repeat("k", 1025),
	} {
		require.ErrorIs(t, s.Put(t.Context(), key, strings.NewReader("x")), blobstore.ErrInvalidKey, "put %q", key)
		_, err := s.Open(t.Context(), key)
		require.ErrorIs(t, err, blobstore.ErrInvalidKey, "open %q", key)
		_, err = s.Stat(t.Context(), key)
		require.ErrorIs(t, err, blobstore.ErrInvalidKey, "stat %q", key)
		require.ErrorIs(t, s.Delete(t.Context(), key), blobstore.ErrInvalidKey, "delete %q", key)
	}
	require.Equal(t, []string{"ok"}, keys(t, s, ""))
}

var errReader = errors.New("reader broke")

// failingReader yields n bytes of r, then errReader.
func failingReader(r io.Reader, n int64) io.Reader {
	return io.MultiReader(io.LimitReader(r, n), readerFunc(func([]byte) (int, error) { return 0, errReader }))
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func testAtomicPutFailingReader(t *testing.T, base string) {
	s := open(t, base)
	for _, n := range []int64{0, 1000, 3 << 20, 20 << 20} {
		key := fmt.Sprintf("partial-%d", n)
		err := s.Put(t.Context(), key, failingReader(newPattern(1), n))
		require.ErrorIs(t, err, errReader, "put of %d bytes then an error", n)
		requireNotFound(t, s, key)
		_, err = s.Open(t.Context(), key)
		require.ErrorIs(t, err, blobstore.ErrNotFound)
	}
	require.Empty(t, keys(t, s, ""))
}

func testAtomicPutCanceledContext(t *testing.T, base string) {
	s := open(t, base)
	ctx, cancel := context.WithCancel(t.Context())
	r := io.MultiReader(
		io.LimitReader(newPattern(2), 1<<20),
		readerFunc(func([]byte) (int, error) { cancel(); return 0, io.EOF }),
	)
	err := s.Put(ctx, "canceled", r)
	require.ErrorIs(t, err, context.Canceled)
	requireNotFound(t, s, "canceled")
	require.Empty(t, keys(t, s, ""))
}

func testAtomicPutKeepsOldObject(t *testing.T, base string) {
	s := open(t, base)
	put(t, s, "k", "old content")
	err := s.Put(t.Context(), "k", failingReader(strings.NewReader(strings.Repeat("new", 100_000)), 200_000))
	require.ErrorIs(t, err, errReader)
	require.Equal(t, "old content", read(t, s, "k"))
	require.Equal(t, []string{"k"}, keys(t, s, ""))
}

func testLargeObjectStreams(t *testing.T, base string) {
	s := open(t, base)
	const key = "large/backup.tar.gz"

	meter := newHeapMeter()
	src := &meteredReader{r: io.LimitReader(newPattern(3), LargeObjectSize), meter: meter}
	wantSum := sha256.New()
	require.NoError(t, s.Put(t.Context(), key, io.TeeReader(src, wantSum)))
	require.EqualValues(t, LargeObjectSize, src.n)
	putGrowth := meter.growth()

	a, err := s.Stat(t.Context(), key)
	require.NoError(t, err)
	require.EqualValues(t, LargeObjectSize, a.Size)

	meter = newHeapMeter()
	r, err := s.Open(t.Context(), key)
	require.NoError(t, err)
	gotSum := sha256.New()
	n, err := io.Copy(&meteredWriter{w: gotSum, meter: meter}, r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.EqualValues(t, LargeObjectSize, n)
	require.Equal(t, wantSum.Sum(nil), gotSum.Sum(nil), "content read back differs")
	openGrowth := meter.growth()

	t.Logf("live heap growth streaming %d MiB: put %d MiB, open %d MiB", LargeObjectSize>>20, putGrowth>>20, openGrowth>>20)
	require.Less(t, putGrowth, uint64(largeObjectHeapBudget), "Put seems to buffer the object")
	require.Less(t, openGrowth, uint64(largeObjectHeapBudget), "Open seems to buffer the object")
}

func testURLHasNoCredentials(t *testing.T, base string) {
	s := open(t, base)
	u, err := url.Parse(s.URL())
	require.NoError(t, err)
	require.Nil(t, u.User, "URL() = %q", s.URL())
	b, err := url.Parse(base)
	require.NoError(t, err)
	require.Equal(t, b.Scheme, u.Scheme)
	if pw, ok := b.User.Password(); ok {
		require.NotContains(t, s.URL(), pw)
	}
}

// newPattern returns an endless, deterministic stream of bytes that do not
// compress.
func newPattern(seed uint64) io.Reader {
	var key [32]byte
	key[0] = byte(seed)
	return rand.NewChaCha8(key)
}

// heapMeter samples the live heap, after a collection, every sampleEvery
// bytes that stream through it. Sampling at byte counts rather than on a
// timer keeps it deterministic.
type heapMeter struct {
	base, peak uint64
	next       int64
}

const sampleEvery = 4 << 20

func newHeapMeter() *heapMeter {
	m := &heapMeter{next: sampleEvery}
	m.base = liveHeap()
	m.peak = m.base
	return m
}

func (m *heapMeter) observe(total int64) {
	if total < m.next {
		return
	}
	m.next = total + sampleEvery
	m.peak = max(m.peak, liveHeap())
}

func (m *heapMeter) growth() uint64 {
	if m.peak < m.base {
		return 0
	}
	return m.peak - m.base
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

type meteredReader struct {
	r     io.Reader
	meter *heapMeter
	n     int64
}

func (m *meteredReader) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	m.n += int64(n)
	m.meter.observe(m.n)
	return n, err
}

type meteredWriter struct {
	w     io.Writer
	meter *heapMeter
	n     int64
}

func (m *meteredWriter) Write(p []byte) (int, error) {
	n, err := m.w.Write(p)
	m.n += int64(n)
	m.meter.observe(m.n)
	return n, err
}
