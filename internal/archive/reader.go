package archive

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

const (
	maxVersionFileSize = 1 << 10
	// maxResourceTypes caps distinct group-resources; clusters have hundreds.
	maxResourceTypes = 1 << 16
	// maxVersionDirs caps version directories per group-resource (one bit
	// each in keySet, bit 0 being the unversioned item).
	maxVersionDirs = 31
	// zstdMaxWindow caps the zstd window, hence the decoder's memory. Every
	// standard level up to 19 fits; --long and --ultra streams are refused.
	zstdMaxWindow = 32 << 20
)

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// Reader streams the items of a Velero backup tarball. Create it with
// NewReader and call Next until it returns io.EOF.
//
// Each item (group-resource, namespace, name) is yielded exactly once, in
// stream order, from its unversioned entry. Its copies under
// <version>/ and <version>-preferredversion/ are checked like items (valid
// JSON, metadata agreeing with the path, no duplicates within their
// directory) and then skipped. A copy whose unversioned item never appears is
// not lost: it is yielded after every other item, preferring the
// -preferredversion copy. Ordinals count yielded items from 0 in that order,
// so they are deterministic for a given tarball.
//
// Decompression runs on a goroutine of the Reader's own, a few chunks ahead;
// it ends at io.EOF, at the first error, on Close, or, for a Reader dropped
// mid-stream without Close, when the Reader is garbage collected. Call Close
// when abandoning a Reader early. A Reader is not safe for concurrent use.
//
// Every error but the source's own I/O errors is an *Error matching
// ErrHostile, and is sticky. Items yielded before an error came from a
// tarball that is rejected as a whole: callers that must not act on a bad
// tarball run Validate first.
type Reader struct {
	lim  Limits
	src  *sourceReader
	br   *bufio.Reader
	ra   *readAhead
	body *bodyReader
	tr   *tarReader

	seed1, seed2 maphash.Seed
	keys         keySet
	grs          map[string]*grInfo
	strs         map[string]string   // see intern
	pending      map[fingerprint]int // index in pendingOrder
	pendingOrder []*Item             // nil once matched by its item
	pendingSize  int64
	tail         []*Item // orphan copies left to yield at EOF

	// verified skips duplicate tracking; see NewVerifiedReader.
	verified bool
	// noLabels leaves Item.Labels nil; see SkipLabels.
	noLabels bool
	copyOnly int64

	entry   string // raw name of the current entry, for errors
	entries int64
	ordinal int64
	copies  int64
	version string
	atEOF   bool
	err     error // sticky

	keyBuf  []byte
	meta    metaParser
	scratch []byte
	// dst is where NextInto wants the next item decoded.
	dst *Item
	// bodies holds the items' bodies: one allocation per chunk of them,
	// and chunks reused once their items are recycled.
	bodies bodies
}

type fingerprint struct {
	h1 uint64
	h2 uint32
}

type grInfo struct {
	items int64
	dirs  []string // version directory i has bit 1<<(i+1)
}

// NewReader sniffs r's compression (gzip or zstd, by magic bytes) and returns
// a Reader of its items. A zero Limits takes the defaults.
func NewReader(r io.Reader, lim Limits) (*Reader, error) {
	lim, err := lim.withDefaults()
	if err != nil {
		return nil, err
	}
	rd := &Reader{
		lim:     lim,
		src:     &sourceReader{r: r, h: sha256.New()},
		seed1:   maphash.MakeSeed(),
		seed2:   maphash.MakeSeed(),
		grs:     make(map[string]*grInfo),
		strs:    make(map[string]string),
		pending: make(map[fingerprint]int),
		bodies:  newBodies(),
	}
	rd.br = bufio.NewReaderSize(rd.src, 64<<10)
	magic, err := rd.br.Peek(4)
	var dec io.Reader
	var closeDec func()
	switch {
	case rd.src.error() != nil:
		return nil, fmt.Errorf("archive: reading backup: %w", rd.src.error())
	case len(magic) >= 2 && string(magic[:2]) == string(gzipMagic):
		gz, gerr := gzip.NewReader(rd.br)
		if gerr != nil {
			return nil, rd.streamErr(gerr)
		}
		dec = gz
	case len(magic) == 4 && string(magic) == string(zstdMagic):
		zd, zerr := zstd.NewReader(rd.br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if zerr != nil {
			return nil, fmt.Errorf("archive: zstd: %w", zerr)
		}
		dec, closeDec = zd, zd.Close
	case err != nil && len(magic) < 2:
		return nil, newErr("", ErrTruncated, "the stream is empty or shorter than a compression header")
	default:
		return nil, newErr("", ErrCorrupt, "not a gzip or zstd stream (unknown magic bytes "+hex.EncodeToString(magic)+")")
	}
	rd.ra = startReadAhead(dec, closeDec)
	runtime.AddCleanup(rd, (*readAhead).stop, rd.ra)
	rd.body = &bodyReader{r: rd.ra, rd: rd}
	rd.tr = newTarReader(rd.body)
	return rd, nil
}

// NewVerifiedReader reads a tarball that Validate already accepted, with
// no copy-only items (Summary.CopyOnlyItems == 0), as Velero writes them.
// It keeps every per-entry check (paths, entry types, sizes, ratio, JSON,
// metadata against path) but none of the per-item state that detects
// duplicates: unversioned items are yielded and versioned copies skipped
// unread, so memory stays flat however many items the tarball holds.
//
// The caller must make sure the stream is the validated one: compare Digest
// with Summary.Digest at io.EOF before acting on the result as a whole.
func NewVerifiedReader(r io.Reader, lim Limits) (*Reader, error) {
	rd, err := NewReader(r, lim)
	if err != nil {
		return nil, err
	}
	rd.verified = true
	return rd, nil
}

// SkipLabels makes Next leave Item.Labels nil, sparing a map per item, for
// callers that do not look at labels. The JSON is checked all the same.
func (r *Reader) SkipLabels() { r.noLabels = true }

// Digest returns the hex sha256 of the compressed bytes read so far; once
// Next has returned io.EOF, that is the digest of the whole stream.
func (r *Reader) Digest() string { return r.src.digest() }

// Close releases the decompressor. It is safe to call more than once, and
// after Next has returned an error. It returns once the read-ahead goroutine
// has stopped reading the source, so the caller may close the source next:
// the source's Read must return when the caller cancels it, as blob and file
// readers do.
func (r *Reader) Close() error {
	if r.err == nil {
		r.err = errors.New("archive: reader closed")
	}
	r.release()
	<-r.ra.exited
	return nil
}

func (r *Reader) release() {
	r.ra.stop()
	r.keys = keySet{}
	r.pending, r.pendingOrder = nil, nil
}

func (r *Reader) fail(err error) error {
	r.err = err
	r.release()
	return err
}

// NextInto is Next, decoding the item into it when it can (it is then
// returned), sparing an allocation per item; otherwise it returns
// another Item, and leaves it untouched.
func (r *Reader) NextInto(it *Item) (*Item, error) {
	r.dst = it
	defer func() { r.dst = nil }()
	return r.Next()
}

// Next returns the next item, or io.EOF after the last one.
func (r *Reader) Next() (*Item, error) {
	if r.err != nil {
		return nil, r.err
	}
	for !r.atEOF {
		hdr, err := r.tr.Next()
		if err == io.EOF {
			if err := r.finish(); err != nil {
				return nil, r.fail(err)
			}
			break
		}
		if err != nil {
			return nil, r.fail(r.streamErr(err))
		}
		it, err := r.entryItem(hdr)
		if err != nil {
			return nil, r.fail(err)
		}
		if it != nil {
			return it, nil
		}
	}
	if len(r.tail) > 0 {
		it := r.tail[0]
		r.tail = r.tail[1:]
		r.copies--
		r.copyOnly++
		r.grs[it.GroupResource()].items++
		it.Ordinal = r.ordinal
		r.ordinal++
		return it, nil
	}
	r.err = io.EOF
	r.release()
	return nil, io.EOF
}

func (r *Reader) entryItem(hdr *tarHeader) (*Item, error) {
	r.entry = hdr.Name
	r.entries++
	if r.entries > r.lim.MaxEntries {
		return nil, newErr(hdr.Name, ErrTooManyEntries, "more than "+strconv.FormatInt(r.lim.MaxEntries, 10)+" entries in the archive")
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil, nil // PAX global metadata; archive/tar does not apply it
	}
	name, why := cleanName(hdr.Name, hdr.Typeflag == tar.TypeDir)
	if why != "" {
		return nil, newErr(hdr.Name, ErrUnsafePath, why)
	}
	switch hdr.Typeflag {
	case tar.TypeReg:
	case tar.TypeDir:
		return nil, nil
	case tar.TypeSymlink:
		return nil, newErr(hdr.Name, ErrEntryType, "symbolic link (to "+strconv.Quote(hdr.Linkname)+"); only regular files and directories are allowed")
	case tar.TypeLink:
		return nil, newErr(hdr.Name, ErrEntryType, "hard link (to "+strconv.Quote(hdr.Linkname)+"); only regular files and directories are allowed")
	case tar.TypeChar, tar.TypeBlock:
		return nil, newErr(hdr.Name, ErrEntryType, "device file; only regular files and directories are allowed")
	case tar.TypeFifo:
		return nil, newErr(hdr.Name, ErrEntryType, "named pipe; only regular files and directories are allowed")
	default:
		return nil, newErr(hdr.Name, ErrEntryType, "unsupported entry type "+strconv.QuoteRune(rune(hdr.Typeflag))+"; only regular files and directories are allowed")
	}
	if hdr.Size > r.lim.MaxEntrySize {
		return nil, newErr(hdr.Name, ErrTooLarge, fmt.Sprintf("entry of %d bytes is over the %d-byte cap", hdr.Size, r.lim.MaxEntrySize))
	}
	switch {
	case name == versionFile:
		return nil, r.readVersion(hdr)
	case strings.HasPrefix(name, resourcesPrefix) && strings.HasSuffix(name, ".json"):
		return r.readItem(name, hdr)
	}
	return nil, nil // ignored; tar skips its body, through the caps
}

func (r *Reader) readVersion(hdr *tarHeader) error {
	if r.version != "" {
		return newErr(hdr.Name, ErrDuplicate, "metadata/version appears twice")
	}
	if hdr.Size > maxVersionFileSize {
		return newErr(hdr.Name, ErrVersion, "format version file is over "+strconv.Itoa(maxVersionFileSize)+" bytes")
	}
	b, err := r.readBody(hdr, r.scratch)
	if err != nil {
		return err
	}
	r.scratch = b[:0]
	v := strings.TrimSpace(string(b))
	if !supportedVersion(v) {
		return newErr(hdr.Name, ErrVersion, "format version "+strconv.Quote(v)+" is not supported (want 1.x.x)")
	}
	r.version = v
	return nil
}

// readBody reads the current entry's body into buf (grown as needed).
func (r *Reader) readBody(hdr *tarHeader, buf []byte) ([]byte, error) {
	if int64(cap(buf)) < hdr.Size {
		buf = make([]byte, hdr.Size)
	}
	buf = buf[:hdr.Size]
	if _, err := io.ReadFull(r.tr, buf); err != nil {
		return nil, r.streamErr(err)
	}
	return buf, nil
}

// readItemBody reads the current entry's body into a slice of its own,
// carved from bodies, and returns the chunk that counts it.
func (r *Reader) readItemBody(hdr *tarHeader) ([]byte, *bodyChunk, error) {
	buf, c := r.bodies.carve(int(hdr.Size))
	if _, err := io.ReadFull(r.tr, buf); err != nil {
		return nil, nil, r.streamErr(err)
	}
	return buf, c, nil
}

func (r *Reader) readItem(name string, hdr *tarHeader) (*Item, error) {
	ip, why := parseItemPath(name)
	if why != "" {
		return nil, newErr(hdr.Name, ErrLayout, why)
	}
	if why := controlInName(ip); why != "" {
		return nil, newErr(hdr.Name, ErrUnsafeName, why)
	}
	gi := r.grs[ip.gr]
	if gi == nil {
		if len(r.grs) >= maxResourceTypes {
			return nil, newErr(hdr.Name, ErrTooManyEntries, "more than "+strconv.Itoa(maxResourceTypes)+" resource types")
		}
		gi = &grInfo{}
		r.grs[strings.Clone(ip.gr)] = gi
	}
	bit := uint32(1)
	if ip.dir != "" {
		i := 0
		for i < len(gi.dirs) && gi.dirs[i] != ip.dir {
			i++
		}
		if i == len(gi.dirs) {
			if i == maxVersionDirs {
				return nil, newErr(hdr.Name, ErrTooManyEntries, "more than "+strconv.Itoa(maxVersionDirs)+" version directories for "+ip.gr)
			}
			gi.dirs = append(gi.dirs, strings.Clone(ip.dir))
		}
		bit = 1 << (i + 1)
	}

	if r.verified {
		if ip.dir != "" {
			r.copies++
			return nil, nil // a copy: Validate proved its item is there
		}
		body, c, err := r.readItemBody(hdr)
		if err != nil {
			return nil, err
		}
		it, err := r.decode(name, hdr, ip, body, true, r.dst)
		if err != nil {
			return nil, err
		}
		r.own(it, c)
		gi.items++
		it.Ordinal = r.ordinal
		r.ordinal++
		return it, nil
	}

	r.keyBuf = append(append(append(append(append(r.keyBuf[:0], ip.gr...), 0), ip.namespace...), 0), ip.name...)
	fp := fingerprint{h1: maphash.Bytes(r.seed1, r.keyBuf), h2: uint32(maphash.Bytes(r.seed2, r.keyBuf))} //nolint:gosec // a second hash: truncating it is the point
	sl := r.keys.get(fp.h1, fp.h2)
	prev := sl.bits
	if prev&bit != 0 {
		where := "the unversioned items"
		if ip.dir != "" {
			where = "version directory " + ip.dir
		}
		return nil, newErr(hdr.Name, ErrDuplicate, "duplicate item: "+keyString(ip)+" appears twice in "+where)
	}
	sl.bits |= bit

	if ip.dir != "" {
		return nil, r.readCopy(name, hdr, ip, fp, prev)
	}
	body, c, err := r.readItemBody(hdr)
	if err != nil {
		return nil, err
	}
	it, err := r.decode(name, hdr, ip, body, true, r.dst)
	if err != nil {
		return nil, err
	}
	r.own(it, c)
	if prev != 0 {
		// Copies came first and the first one is pending: the item is here.
		pc := r.pendingItem(fp)
		if pc == nil || pc.Key() != it.Key() {
			return nil, r.collision(hdr.Name, pc, it)
		}
		r.dropPending(fp, pc)
	}
	gi.items++
	it.Ordinal = r.ordinal
	r.ordinal++
	return it, nil
}

func (r *Reader) readCopy(name string, hdr *tarHeader, ip itemPath, fp fingerprint, prev uint32) error {
	body, err := r.readBody(hdr, r.scratch)
	if err != nil {
		return err
	}
	r.scratch = body[:0]
	it, err := r.decode(name, hdr, ip, body, prev == 0, nil)
	if err != nil {
		return err
	}
	r.copies++
	switch {
	case prev&1 != 0:
		return nil // a copy of an item already yielded
	case prev == 0:
		// The first sighting of this key: hold the copy until its item shows
		// up, or yield it at the end.
		it.Object = append([]byte(nil), body...)
		r.pendingSize += int64(len(body)) + pendingOverhead
		if r.pendingSize > r.lim.MaxPendingSize {
			return r.pendingErr(hdr.Name)
		}
		r.pending[fp] = len(r.pendingOrder)
		r.pendingOrder = append(r.pendingOrder, it)
		return nil
	}
	pc := r.pendingItem(fp)
	if pc == nil || pc.Key() != keyString(ip) {
		return r.collision(hdr.Name, pc, &Item{Group: ip.group, Resource: ip.resource, Namespace: ip.namespace, Name: ip.name})
	}
	if strings.HasSuffix(ip.dir, preferredSuffix) && !strings.Contains(pc.Path, preferredSuffix+"/") {
		// Prefer the preferred version's copy.
		it, err = r.decode(name, hdr, ip, body, true, nil)
		if err != nil {
			return err
		}
		it.Object = append([]byte(nil), body...)
		r.pendingSize += int64(len(body)) - int64(len(pc.Object))
		if r.pendingSize > r.lim.MaxPendingSize {
			return r.pendingErr(hdr.Name)
		}
		*pc = *it
	}
	return nil
}

// pendingOverhead is charged per pending copy on top of its body, so that
// MaxPendingSize also bounds the number of pending copies.
const pendingOverhead = 512

func (r *Reader) pendingItem(fp fingerprint) *Item {
	i, ok := r.pending[fp]
	if !ok {
		return nil
	}
	return r.pendingOrder[i]
}

func (r *Reader) dropPending(fp fingerprint, pc *Item) {
	r.pendingOrder[r.pending[fp]] = nil
	delete(r.pending, fp)
	r.pendingSize -= int64(len(pc.Object)) + pendingOverhead
	if len(r.pending) == 0 {
		clear(r.pendingOrder)
		r.pendingOrder = r.pendingOrder[:0]
	}
}

func (r *Reader) pendingErr(entry string) error {
	return newErr(entry, ErrTooLarge, fmt.Sprintf("more than %d bytes of versioned copies arrived before their items (Velero writes each item before its copies)", r.lim.MaxPendingSize))
}

func (r *Reader) collision(entry string, a, b *Item) error {
	ka := "(none)"
	if a != nil {
		ka = a.Key()
	}
	return newErr(entry, ErrDuplicate, "item "+b.Key()+" has the same 96-bit key fingerprint as "+ka+"; this should never happen, please report it")
}

func keyString(ip itemPath) string { return ip.gr + "/" + ip.namespace + "/" + ip.name }

// decode parses body's metadata, checks it against the path and returns the
// item, which owns body. Labels are decoded only when wanted.
func (r *Reader) decode(name string, hdr *tarHeader, ip itemPath, body []byte, labels bool, dst *Item) (*Item, error) {
	m, err := r.meta.parse(body, labels && !r.noLabels)
	if err != nil {
		return nil, &Error{Entry: hdr.Name, Kind: ErrInvalidJSON, Reason: "invalid JSON: " + oneLine(err.Error()), Err: err}
	}
	switch {
	case len(m.apiVersion) == 0:
		return nil, newErr(hdr.Name, ErrInvalidJSON, "not a Kubernetes object: no apiVersion")
	case len(m.kind) == 0:
		return nil, newErr(hdr.Name, ErrInvalidJSON, "not a Kubernetes object: no kind")
	case len(m.name) == 0:
		return nil, newErr(hdr.Name, ErrInvalidJSON, "not a Kubernetes object: no metadata.name")
	}
	group, version, ok := bytes.Cut(m.apiVersion, []byte("/"))
	if !ok {
		group, version = nil, m.apiVersion
	}
	switch {
	case len(version) == 0 || bytes.IndexByte(version, '/') >= 0 || ok && len(group) == 0:
		return nil, newErr(hdr.Name, ErrInvalidJSON, "malformed apiVersion "+strconv.Quote(string(m.apiVersion)))
	case string(group) != ip.group:
		return nil, newErr(hdr.Name, ErrMismatch, "apiVersion "+strconv.Quote(string(m.apiVersion))+" is not in the path's API group "+strconv.Quote(ip.group))
	case ip.dir != "" && string(version) != ip.version:
		return nil, newErr(hdr.Name, ErrMismatch, "apiVersion "+strconv.Quote(string(m.apiVersion))+" does not match version directory "+strconv.Quote(ip.dir))
	case string(m.name) != ip.name:
		return nil, newErr(hdr.Name, ErrMismatch, "metadata.name "+strconv.Quote(string(m.name))+" differs from the path's "+strconv.Quote(ip.name))
	case string(m.namespace) != ip.namespace:
		want := strconv.Quote(ip.namespace)
		if ip.namespace == "" {
			want = "none (the path says cluster-scoped)"
		}
		return nil, newErr(hdr.Name, ErrMismatch, "metadata.namespace "+strconv.Quote(string(m.namespace))+" differs from the path's: "+want)
	}
	if dst == nil {
		dst = new(Item)
	}
	*dst = Item{
		Path:      name,
		Group:     ip.group,
		Version:   r.intern(version),
		Resource:  ip.resource,
		Kind:      r.intern(m.kind),
		Namespace: ip.namespace,
		Name:      ip.name,
		Labels:    m.labels,
		Object:    body,
	}
	return dst, nil
}

// own records that it's body was carved from c, for Recycle.
func (r *Reader) own(it *Item, c *bodyChunk) {
	if c != nil {
		it.chunk, it.from = c, r
	}
}

// maxInterned bounds the strings intern keeps (kinds and versions: a few
// hundred in a real cluster).
const maxInterned = 4096

// intern returns b as a string, shared between items when possible.
func (r *Reader) intern(b []byte) string {
	if s, ok := r.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(r.strs) < maxInterned {
		r.strs[s] = s
	}
	return s
}

// finish runs at the tar end-of-archive marker: the rest of the stream must
// be zero padding, the compressed stream must end cleanly with nothing after
// it, and metadata/version must have been seen.
func (r *Reader) finish() error {
	buf := r.scratch[:cap(r.scratch)]
	if len(buf) < 32<<10 {
		buf = make([]byte, 32<<10)
	}
	for {
		n, err := r.body.Read(buf)
		for _, c := range buf[:n] {
			if c != 0 {
				return newErr(r.entry, ErrCorrupt, "data after the end of the tar archive")
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			err = r.streamErr(err)
			if ae := (*Error)(nil); errors.As(err, &ae) && ae.Kind == ErrCorrupt {
				ae.Reason = "data after the end of the archive: " + ae.Reason
			}
			return err
		}
	}
	<-r.ra.exited // the decompressor is done with r.br
	if n, _ := io.ReadFull(r.br, buf[:1]); n > 0 {
		return newErr(r.entry, ErrCorrupt, "trailing data after the compressed stream")
	}
	if err := r.src.error(); err != nil {
		return fmt.Errorf("archive: reading backup: %w", err)
	}
	if r.version == "" {
		return newErr(versionFile, ErrVersion, "the archive has no metadata/version, so it is not a Velero backup")
	}
	for _, it := range r.pendingOrder {
		if it != nil {
			r.tail = append(r.tail, it)
		}
	}
	r.pending, r.pendingOrder = nil, nil
	r.atEOF = true
	return nil
}

// streamErr classifies an error from the tar or decompression layers.
func (r *Reader) streamErr(err error) error {
	var ae *Error
	switch {
	case errors.As(err, &ae):
		return ae
	case r.src.error() != nil:
		return fmt.Errorf("archive: reading backup: %w", r.src.error())
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return &Error{Entry: r.entry, Kind: ErrTruncated, Reason: "the stream ends early (truncated or cut short)", Err: err}
	}
	return &Error{Entry: r.entry, Kind: ErrCorrupt, Reason: "corrupt stream: " + oneLine(err.Error()), Err: err}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// sourceReader counts and hashes the compressed bytes, and remembers the
// source's own errors so they are not mistaken for hostile input. It is read
// on the read-ahead goroutine and queried on the caller's.
type sourceReader struct {
	r  io.Reader
	mu sync.Mutex
	h  hash.Hash
	n  atomic.Int64
	// err is the source's first error other than io.EOF.
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.mu.Lock()
	s.h.Write(p[:n])
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.n.Add(int64(n))
	return n, err
}

func (s *sourceReader) error() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *sourceReader) digest() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return hex.EncodeToString(s.h.Sum(nil))
}

// bodyReader counts the decompressed bytes and enforces the total and ratio
// caps as they stream.
type bodyReader struct {
	r  io.Reader
	rd *Reader
	n  int64
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	lim := &b.rd.lim
	switch {
	case b.n > lim.MaxTotalSize:
		return 0, newErr(b.rd.entry, ErrTooLarge, fmt.Sprintf("the archive decompresses to over %d bytes, the total cap", lim.MaxTotalSize))
	case b.n > ratioFloor && float64(b.n) > lim.MaxRatio*float64(b.rd.src.n.Load()):
		return 0, newErr(b.rd.entry, ErrBomb, fmt.Sprintf("decompression bomb: %d compressed bytes expand to %d, over the %gx ratio cap", b.rd.src.n.Load(), b.n, lim.MaxRatio))
	}
	return n, err
}
