package blobstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// ErrInvalidKey is returned for a key that no backend may store: empty, not
// UTF-8, too long, with control characters, with an empty, "." or ".."
// segment, with a leading or trailing "/", or with a suffix the file:// store
// reserves for its own files.
var ErrInvalidKey = errors.New("blobstore: invalid key")

// maxKeyLen is S3's limit on key length, in bytes.
const maxKeyLen = 1024

type backendKind int

const (
	kindFile backendKind = iota + 1
	kindS3
)

// store implements Store on a gocloud blob.Bucket.
type store struct {
	bucket *blob.Bucket
	url    string
	kind   backendKind
	// dir is the root folder of a file:// store; "" otherwise.
	dir string
	// closeTransport drops idle HTTP connections; nil for file://.
	closeTransport func()
	// limits bound each List.
	limits ListLimits
}

var _ Store = (*store)(nil)

// fileTempName matches the temporary files a file:// Put writes beside their
// final path: "<name>.<hex nanoseconds>.tmp".
var fileTempName = regexp.MustCompile(`\.[0-9a-f]+\.tmp$`)

// checkKey reports whether key is storable on every backend, so that a key
// valid on file:// is valid on s3:// and the other way round.
func checkKey(key string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, why) }
	switch {
	case key == "":
		return bad("empty")
	case len(key) > maxKeyLen:
		return bad(fmt.Sprintf("longer than %d bytes", maxKeyLen))
	case !utf8.ValidString(key):
		return bad("not UTF-8")
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return bad("control character")
	case strings.HasSuffix(key, ".attrs"):
		return bad(`the ".attrs" suffix is reserved`)
	case fileTempName.MatchString(key):
		return bad(`the ".<hex>.tmp" suffix is reserved for partial writes`)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad(`empty, "." or ".." segment`)
		}
	}
	return nil
}

// wrapErr maps gocloud's not-found to ErrNotFound and names the operation.
// A key below an existing object's name (file "a", key "a/b") is not found
// either, though the file system says ENOTDIR.
func wrapErr(op, key string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%s %q: %w", op, key, ErrNotFound)
	}
	return fmt.Errorf("blobstore: %s %q: %w", op, key, err)
}

// Put streams r into key. The object appears only once r has been read to
// EOF and the backend has committed it: on any error, including one from r,
// the write is aborted and an earlier object under key is left as it was.
func (s *store) Put(ctx context.Context, key string, r io.Reader) (err error) {
	if err := checkKey(key); err != nil {
		return err
	}
	if s.kind == kindFile {
		return s.filePut(ctx, key, r)
	}
	// Cancelling the writer's context before Close is how gocloud aborts a
	// write: s3blob aborts its upload.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := &blob.WriterOptions{
		// A set content type stops blob.Writer buffering to sniff one.
		ContentType:    "application/octet-stream",
		BufferSize:     s3PartSize,
		MaxConcurrency: s3UploadConcurrency,
	}
	w, err := s.bucket.NewWriter(wctx, key, opts)
	if err != nil {
		return wrapErr("put", key, err)
	}
	if _, err := io.Copy(w, r); err != nil {
		cancel()
		_ = w.Close() // Reports the cancellation; err says why.
		return fmt.Errorf("blobstore: put %q: %w", key, err)
	}
	if err := w.Close(); err != nil {
		return wrapErr("put", key, err)
	}
	return nil
}

// Open streams key. The caller must Close the reader. On s3:// it is one
// GET, resumed from the byte it reached if the download breaks (see
// resumingReader).
func (s *store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if s.kind == kindFile {
		return s.fileOpen(key, Version{})
	}
	r, err := s.bucket.NewReader(ctx, key, nil)
	if err != nil {
		return nil, wrapErr("open", key, err)
	}
	if s.kind == kindS3 {
		return newResumingReader(ctx, s.bucket, key, r), nil
	}
	return r, nil
}

// Stat returns key's attributes.
func (s *store) Stat(ctx context.Context, key string) (Attributes, error) {
	if err := checkKey(key); err != nil {
		return Attributes{}, err
	}
	if s.kind == kindFile {
		return s.fileStat(key)
	}
	a, err := s.bucket.Attributes(ctx, key)
	if err != nil {
		return Attributes{}, wrapErr("stat", key, err)
	}
	out := Attributes{Key: key, Size: a.Size, ModTime: a.ModTime}
	out.Version.ETag = a.ETag
	var head s3.HeadObjectOutput
	if a.As(&head) {
		out.Version.VersionID = aws.ToString(head.VersionId)
	}
	return out, nil
}

// OpenVersion is Open pinned to the version v: the read is refused with
// ErrVersionMismatch, before any byte is returned, unless the object it
// opens is that version. On s3:// the GET carries If-Match with v's ETag
// (and a resumed download stays pinned to it), and the VersionId the GET
// returns must be v's when v records one; on file:// the opened file's
// modification time and inode must be v's. The zero v pins
// nothing: OpenVersion is Open.
func (s *store) OpenVersion(ctx context.Context, key string, v Version) (io.ReadCloser, error) {
	if v.IsZero() {
		return s.Open(ctx, key)
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if s.kind == kindFile {
		return s.fileOpen(key, v)
	}
	opts := &blob.ReaderOptions{
		BeforeRead: func(as func(any) bool) error {
			var in *s3.GetObjectInput
			if v.ETag != "" && as(&in) {
				in.IfMatch = aws.String(v.ETag)
			}
			return nil
		},
	}
	r, err := s.bucket.NewReader(ctx, key, opts)
	if errors.Is(err, ErrVersionMismatch) {
		return nil, err
	}
	if gcerrors.Code(err) == gcerrors.FailedPrecondition {
		// If-Match failed: another object is at key now.
		found := Version{}
		if a, serr := s.Stat(ctx, key); serr == nil {
			found = a.Version
		}
		return nil, mismatch(key, v, found)
	}
	if err != nil {
		return nil, wrapErr("open", key, err)
	}
	// Whatever the server made of If-Match, the object it sent must be
	// the pinned one.
	var out s3.GetObjectOutput
	if r.As(&out) {
		found := Version{ETag: aws.ToString(out.ETag), VersionID: aws.ToString(out.VersionId)}
		if !(Version{ETag: v.ETag, VersionID: v.VersionID}).Matches(found) {
			_ = r.Close()
			return nil, mismatch(key, v, found)
		}
	}
	return newResumingReader(ctx, s.bucket, key, r), nil
}

// Delete removes key; ErrNotFound if it does not exist.
func (s *store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if s.kind == kindFile {
		return s.fileDelete(key)
	}
	if err := s.bucket.Delete(ctx, key); err != nil {
		return wrapErr("delete", key, err)
	}
	return nil
}

// List returns the objects whose keys start with prefix, sorted by key.
// The prefix is a plain string prefix: "b" matches "b/x" and "bb".
func (s *store) List(ctx context.Context, prefix string) ([]Attributes, error) {
	lim := s.limits.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	if s.kind == kindFile {
		return s.fileList(ctx, prefix, lim)
	}
	pages := 0
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix, BeforeList: func(func(any) bool) error {
		// Called before each request of the listing (s3://).
		if pages++; pages > lim.MaxPages {
			return errListPages
		}
		return nil
	}})
	tooLong := func(why string) error {
		return fmt.Errorf("blobstore: list %q in %s: %w: %s; nothing is concluded from it", prefix, s.url, ErrListingTooLong, why)
	}
	var out []Attributes
	budget := keyBudget{lim: lim}
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		switch {
		case err == nil:
		case pages > lim.MaxPages:
			return nil, tooLong(fmt.Sprintf("more than %d pages", lim.MaxPages))
		case ctx.Err() == context.DeadlineExceeded:
			return nil, tooLong(fmt.Sprintf("it did not end within %s (%d pages, %d keys)", lim.Timeout, pages, len(out)))
		default:
			return nil, fmt.Errorf("blobstore: list %q: %w", prefix, err)
		}
		if obj.IsDir {
			continue
		}
		if why := budget.add(obj.Key); why != "" {
			return nil, tooLong(why)
		}
		out = append(out, Attributes{Key: obj.Key, Size: obj.Size, ModTime: obj.ModTime})
	}
	slices.SortFunc(out, func(a, b Attributes) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// ErrListingTooLong means a listing went past its bounds (ListLimits): a
// store that never stops listing, or more keys than Lethe keeps in
// memory. Nothing is concluded from it: no backup is taken for missing.
var ErrListingTooLong = errors.New("the listing went past its bounds")

var errListPages = errors.New("too many list pages")

// ListLimits bound one List: its keys, the bytes of their names, its
// requests (pages, s3://) and its time. Zero fields take the defaults.
type ListLimits struct {
	MaxKeys     int
	MaxKeyBytes int
	MaxPages    int
	Timeout     time.Duration
}

// Default listing bounds: a million keys (some 70,000 Velero backups),
// 128 MiB of key names (S3 allows 1,024 bytes a key, so a million keys
// alone could hold a gigabyte; Velero's keys are under 100 bytes), 10,000
// pages (S3 returns up to 1,000 keys a page), ten minutes.
const (
	DefaultMaxListKeys     = 1_000_000
	DefaultMaxListKeyBytes = 128 << 20
	DefaultMaxListPages    = 10_000
	DefaultListTimeout     = 10 * time.Minute
)

func (l ListLimits) withDefaults() ListLimits {
	return ListLimits{
		MaxKeys:     cmp.Or(l.MaxKeys, DefaultMaxListKeys),
		MaxKeyBytes: cmp.Or(l.MaxKeyBytes, DefaultMaxListKeyBytes),
		MaxPages:    cmp.Or(l.MaxPages, DefaultMaxListPages),
		Timeout:     cmp.Or(l.Timeout, DefaultListTimeout),
	}
}

// keyBudget counts a listing's keys and the bytes of their names against
// its bounds; add returns why the listing is too long, or "".
type keyBudget struct {
	lim   ListLimits
	keys  int
	bytes int
}

func (b *keyBudget) add(key string) string {
	if b.keys == b.lim.MaxKeys {
		return fmt.Sprintf("more than %d keys", b.lim.MaxKeys)
	}
	if b.bytes += len(key); b.bytes > b.lim.MaxKeyBytes {
		return fmt.Sprintf("more than %d bytes of key names (%d keys)", b.lim.MaxKeyBytes, b.keys)
	}
	b.keys++
	return ""
}

// URL returns the store's location without credentials.
func (s *store) URL() string { return s.url }

// Close releases the bucket and, for s3://, its idle connections.
func (s *store) Close() error {
	var err error
	if s.bucket != nil {
		err = s.bucket.Close()
	}
	if s.closeTransport != nil {
		s.closeTransport()
	}
	if err != nil {
		return fmt.Errorf("blobstore: close %s: %w", s.url, err)
	}
	return nil
}
