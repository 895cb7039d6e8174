// Package archivetest builds Velero-layout backup tarballs for tests and
// benchmarks of any package. It writes valid archives only, plus raw entries
// for tests that need to craft hostile ones; it never reads archives.
//
// Generation is deterministic: the same arguments always give the same bytes.
package archivetest

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"iter"
	"sort"
	"strconv"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression selects the stream compression of a generated tarball.
type Compression int

const (
	// Gzip is Velero's own format and the default.
	Gzip Compression = iota
	// Zstd writes a zstd stream.
	Zstd
	// None writes a bare tar stream; archive.Reader rejects it, so it is only
	// useful for tests of that rejection.
	None
)

// FormatVersion is the Velero tarball format written by default.
const FormatVersion = "1.1.0"

// ModTime is the modification time stamped on every entry.
var ModTime = time.Date(2024, 4, 12, 3, 0, 0, 0, time.UTC)

// ItemSpec describes one item to write. Group is empty for the core group.
type ItemSpec struct {
	Group     string
	Version   string // default "v1"
	Resource  string
	Kind      string
	Namespace string // empty for cluster-scoped items
	Name      string
	Labels    map[string]string
	// Size pads the JSON with a data field to about this many bytes.
	Size int
	// Object, if set, is written verbatim instead of generated JSON.
	Object []byte
}

// GroupResource returns "resource.group", or "resource" for the core group.
func (s ItemSpec) GroupResource() string {
	if s.Group == "" {
		return s.Resource
	}
	return s.Resource + "." + s.Group
}

// Key returns the key archive.Item.Key returns for this item.
func (s ItemSpec) Key() string { return s.GroupResource() + "/" + s.Namespace + "/" + s.Name }

// Path returns the item's unversioned path in the tarball.
func (s ItemSpec) Path() string { return ItemPath(s.GroupResource(), "", s.Namespace, s.Name) }

// ItemPath returns the tarball path of an item. dir is "" for the
// unversioned copy, or a version directory such as "v1-preferredversion".
func ItemPath(groupResource, dir, namespace, name string) string {
	p := "resources/" + groupResource + "/"
	if dir != "" {
		p += dir + "/"
	}
	if namespace == "" {
		return p + "cluster/" + name + ".json"
	}
	return p + "namespaces/" + namespace + "/" + name + ".json"
}

// Options tune Write.
type Options struct {
	Compression Compression
	// Level is the compressor's level; zero means the fastest level.
	Level int
	// FormatVersion is written to metadata/version; empty means FormatVersion.
	FormatVersion string
	// NoVersionFile omits metadata/version.
	NoVersionFile bool
	// PreferredVersionCopies writes each item a second time under
	// <version>-preferredversion/, right after its unversioned copy, as
	// Velero does since format 1.1.0.
	PreferredVersionCopies bool
}

// Entry is a raw tar entry for WriteEntries.
type Entry struct {
	Name     string
	Type     byte // default tar.TypeReg
	Linkname string
	Body     []byte
	// Size overrides the header's size when non-zero (for lying headers).
	Size int64
}

// Write writes a Velero tarball holding items, in order.
func Write(w io.Writer, items []ItemSpec, opts Options) error {
	return WriteSeq(w, func(yield func(ItemSpec) bool) {
		for _, it := range items {
			if !yield(it) {
				return
			}
		}
	}, opts)
}

// WriteN writes a gzip Velero tarball of n generated items of about size
// bytes each: SpecN(0, size) … SpecN(n-1, size). No preferred-version copies
// are written, so the tarball holds exactly n item entries.
func WriteN(w io.Writer, n, size int) error {
	return WriteSeq(w, SeqN(n, size), Options{})
}

// SeqN yields SpecN(i, size) for i in [0, n).
func SeqN(n, size int) iter.Seq[ItemSpec] {
	return func(yield func(ItemSpec) bool) {
		for i := range n {
			if !yield(SpecN(i, size)) {
				return
			}
		}
	}
}

type kindSpec struct {
	group, version, resource, kind string
	cluster                        bool
}

var kinds = []kindSpec{
	{"", "v1", "pods", "Pod", false},
	{"", "v1", "configmaps", "ConfigMap", false},
	{"apps", "v1", "deployments", "Deployment", false},
	{"", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", false},
	{"snapshot.storage.k8s.io", "v1", "volumesnapshots", "VolumeSnapshot", false},
	{"", "v1", "persistentvolumes", "PersistentVolume", true},
	{"rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", true},
}

// Namespaces is the number of namespaces SpecN spreads items over.
const Namespaces = 8

// SpecN returns the i-th generated item: kinds rotate over pods, configmaps,
// deployments.apps, persistentvolumeclaims, volumesnapshots (namespaced over
// ns-0…ns-7) and persistentvolumes, clusterroles (cluster-scoped); every item
// has labels app, tier and index.
func SpecN(i, size int) ItemSpec {
	k := kinds[i%len(kinds)]
	s := ItemSpec{
		Group: k.group, Version: k.version, Resource: k.resource, Kind: k.kind,
		Name: k.resource[:len(k.resource)-1] + "-" + strconv.Itoa(i),
		Labels: map[string]string{
			"app":   "app-" + strconv.Itoa(i%13),
			"tier":  [...]string{"web", "db", "cache"}[i%3],
			"index": strconv.Itoa(i),
		},
		Size: size,
	}
	if !k.cluster {
		s.Namespace = "ns-" + strconv.Itoa(i%Namespaces)
	}
	return s
}

// WriteSeq writes a Velero tarball of the items yielded by seq.
func WriteSeq(w io.Writer, seq iter.Seq[ItemSpec], opts Options) (err error) {
	cw, err := compressor(w, opts)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(cw)
	if !opts.NoVersionFile {
		if err := writeFile(tw, "metadata/version", []byte(cmpOr(opts.FormatVersion, FormatVersion)+"\n")); err != nil {
			return err
		}
	}
	var buf []byte
	for s := range seq {
		buf = AppendJSON(buf[:0], s)
		if err := writeFile(tw, s.Path(), buf); err != nil {
			return err
		}
		if opts.PreferredVersionCopies {
			p := ItemPath(s.GroupResource(), cmpOr(s.Version, "v1")+"-preferredversion", s.Namespace, s.Name)
			if err := writeFile(tw, p, buf); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return cw.Close()
}

// WriteEntries writes raw entries as a tar stream with the given compression.
func WriteEntries(w io.Writer, entries []Entry, c Compression) error {
	cw, err := compressor(w, Options{Compression: c})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(cw)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		size := int64(len(e.Body))
		if e.Size != 0 {
			size = e.Size
		}
		if typ != tar.TypeReg {
			size = 0
		}
		hdr := &tar.Header{Typeflag: typ, Name: e.Name, Linkname: e.Linkname, Size: size, Mode: 0o644, ModTime: ModTime}
		if typ == tar.TypeDir {
			hdr.Mode = 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if len(e.Body) > 0 && typ == tar.TypeReg {
			if _, err := tw.Write(e.Body); err != nil && !(e.Size != 0 && errors.Is(err, tar.ErrWriteTooLong)) {
				return err
			}
		}
		if e.Size != 0 && e.Size != int64(len(e.Body)) {
			// A lying header: stop here, the stream is cut short on purpose.
			tw.Flush() // the entry is short on purpose: its error does not matter
			return cw.Close()
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return cw.Close()
}

func writeFile(tw *tar.Writer, name string, body []byte) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(body)), Mode: 0o644, ModTime: ModTime}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := tw.Write(body)
	return err
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func compressor(w io.Writer, opts Options) (io.WriteCloser, error) {
	switch opts.Compression {
	case Gzip:
		return gzip.NewWriterLevel(w, cmpOr(opts.Level, gzip.BestSpeed))
	case Zstd:
		lvl := zstd.SpeedFastest
		if opts.Level != 0 {
			lvl = zstd.EncoderLevelFromZstd(opts.Level)
		}
		return zstd.NewWriter(w, zstd.WithEncoderLevel(lvl), zstd.WithEncoderConcurrency(1))
	case None:
		return nopCloser{w}, nil
	}
	return nil, fmt.Errorf("archivetest: unknown compression %d", opts.Compression)
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// filler is a small vocabulary; picking words from it pseudo-randomly gives
// padding that compresses about as well as real Kubernetes JSON.
var filler = []string{
	"container", "image", "registry.example.com", "sha256", "volume", "mount",
	"readiness", "liveness", "probe", "port", "8080", "tcp", "env", "value",
	"secret", "config", "annotation", "kubectl.kubernetes.io", "last-applied",
	"replica", "selector", "matchLabels", "template", "resources", "limits",
	"requests", "cpu", "memory", "500m", "256Mi", "status", "Running", "Ready",
	"True", "False", "2024-04-12T03:00:00Z", "node", "worker", "zone", "a", "b",
}

// AppendJSON appends the item's JSON object (or s.Object verbatim) to buf.
func AppendJSON(buf []byte, s ItemSpec) []byte {
	if s.Object != nil {
		return append(buf, s.Object...)
	}
	start := len(buf)
	buf = append(buf, `{"apiVersion":"`...)
	if s.Group != "" {
		buf = append(buf, s.Group...)
		buf = append(buf, '/')
	}
	buf = append(buf, cmpOr(s.Version, "v1")...)
	buf = append(buf, `","kind":"`...)
	buf = append(buf, s.Kind...)
	buf = append(buf, `","metadata":{"name":`...)
	buf = strconv.AppendQuote(buf, s.Name)
	if s.Namespace != "" {
		buf = append(buf, `,"namespace":`...)
		buf = strconv.AppendQuote(buf, s.Namespace)
	}
	if len(s.Labels) > 0 {
		buf = append(buf, `,"labels":{`...)
		keys := make([]string, 0, len(s.Labels))
		for k := range s.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendQuote(buf, k)
			buf = append(buf, ':')
			buf = strconv.AppendQuote(buf, s.Labels[k])
		}
		buf = append(buf, '}')
	}
	buf = append(buf, `,"uid":"`...)
	buf = strconv.AppendUint(buf, mix(uint64(len(s.Name))*31+hashString(s.Key())), 16)
	buf = append(buf, `"}`...)
	if pad := s.Size - (len(buf) - start) - 12; pad > 0 {
		buf = append(buf, `,"data":"`...)
		x := hashString(s.Key())
		for n := 0; n < pad; {
			x = mix(x)
			w := filler[x%uint64(len(filler))]
			buf = append(buf, w...)
			buf = append(buf, ' ')
			n += len(w) + 1
		}
		buf = append(buf, '"')
	}
	return append(buf, '}')
}

func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb3f99fbd9f4d
	x ^= x >> 33
	return x
}
