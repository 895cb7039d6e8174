package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
)

// tarReader reads tar headers and bodies like archive/tar's Reader, for
// the formats a Velero tarball uses (USTAR, PAX, GNU long names, V7),
// keeping only what Reader needs (name, type, size, link name), without
// the ten or so allocations archive/tar makes per entry. Anything it does
// not understand is an error (tar.ErrHeader) or an entry type that Reader
// refuses: a tarball is rejected rather than read differently.
type tarReader struct {
	r   io.Reader
	blk [blockSize]byte
	// remaining is the current body's unread bytes; pad the zero padding
	// after it.
	remaining, pad int64
	hdr            tarHeader
	scratch        []byte // PAX records and GNU long names
	name, link     []byte // the next entry's, from them
	// strs holds the names: one allocation per chunk of them.
	strs slab
}

// tarHeader is the part of a tar header that Reader uses.
type tarHeader struct {
	Name     string
	Linkname string
	Typeflag byte
	Size     int64
}

const (
	blockSize = 512
	// maxSpecialFileSize caps PAX headers and GNU long names, as
	// archive/tar does.
	maxSpecialFileSize = 1 << 20
)

func newTarReader(r io.Reader) *tarReader { return &tarReader{r: r} }

// Next skips the rest of the current entry and returns the next header,
// or io.EOF at the end-of-archive marker (two zero blocks). The header is
// valid until the next call.
func (t *tarReader) Next() (*tarHeader, error) {
	// name and link are non-nil once set by PAX records or GNU long names.
	var name, link []byte
	var paxSize int64 = -1
	for {
		if err := t.skip(t.remaining + t.pad); err != nil {
			return nil, err
		}
		t.remaining, t.pad = 0, 0
		if _, err := io.ReadFull(t.r, t.blk[:]); err != nil {
			return nil, err
		}
		if t.blk == [blockSize]byte{} {
			if _, err := io.ReadFull(t.r, t.blk[:]); err != nil {
				return nil, err
			}
			if t.blk == [blockSize]byte{} {
				return nil, io.EOF
			}
			return nil, tar.ErrHeader
		}
		if !t.checksumOK() {
			return nil, tar.ErrHeader
		}
		b := &t.blk
		size, ok := parseNumeric(b[124:136])
		if !ok || size < 0 {
			return nil, tar.ErrHeader
		}
		flag := b[156]
		magic := string(b[257:265])
		ustar := magic[:6] == "ustar\x00" // USTAR or PAX; "ustar  \x00" is GNU
		switch flag {
		case tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
			if size > maxSpecialFileSize {
				return nil, tar.ErrHeader
			}
			t.remaining, t.pad = size, padding(size)
			buf, err := t.readSpecial(size)
			if err != nil {
				return nil, err
			}
			switch flag {
			case tar.TypeXHeader:
				var perr error
				if name, link, paxSize, perr = parsePAX(buf, name, link, paxSize, t); perr != nil {
					return nil, perr
				}
			case tar.TypeGNULongName:
				name = append(t.name[:0], cString(buf)...)
				t.name = name
			default:
				link = append(t.link[:0], cString(buf)...)
				t.link = link
			}
			continue
		}
		h := &t.hdr
		*h = tarHeader{Typeflag: flag, Size: size}
		if paxSize >= 0 {
			h.Size = paxSize
		}
		switch {
		case name != nil:
			h.Name = t.strs.string(name)
		case ustar && b[345] != 0:
			h.Name = t.strs.string(cString(b[345:500]), []byte("/"), cString(b[0:100]))
		default:
			h.Name = t.strs.string(cString(b[0:100]))
		}
		if link != nil {
			h.Linkname = string(link)
		} else if b[157] != 0 {
			h.Linkname = string(cString(b[157:257]))
		}
		if h.Typeflag == '\x00' { // the old regular-file flag (tar.TypeRegA, deprecated)
			h.Typeflag = tar.TypeReg
			if strings.HasSuffix(h.Name, "/") {
				h.Typeflag = tar.TypeDir
			}
		}
		switch h.Typeflag {
		case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
			// Header-only types: any size is ignored, as archive/tar does.
			t.remaining, t.pad = 0, 0
		default:
			t.remaining, t.pad = h.Size, padding(h.Size)
		}
		return h, nil
	}
}

// Read reads the current entry's body.
func (t *tarReader) Read(p []byte) (int, error) {
	if t.remaining == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > t.remaining {
		p = p[:t.remaining]
	}
	n, err := t.r.Read(p)
	t.remaining -= int64(n)
	if err == io.EOF && t.remaining > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (t *tarReader) readSpecial(size int64) ([]byte, error) {
	if int64(cap(t.scratch)) < size {
		t.scratch = make([]byte, size)
	}
	buf := t.scratch[:size]
	if _, err := io.ReadFull(t, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// skip discards n bytes of the stream.
func (t *tarReader) skip(n int64) error {
	for n > 0 {
		k := min(n, blockSize)
		if _, err := io.ReadFull(t.r, t.blk[:k]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		n -= k
	}
	return nil
}

func padding(size int64) int64 { return -size & (blockSize - 1) }

// checksumOK checks the header's checksum, signed or unsigned (both are
// found in the wild, and archive/tar accepts both).
func (t *tarReader) checksumOK() bool {
	want, ok := parseNumeric(t.blk[148:156])
	if !ok {
		return false
	}
	var unsigned, signed int64
	for i, c := range t.blk[:] {
		if i >= 148 && i < 156 {
			c = ' '
		}
		unsigned += int64(c)
		signed += int64(int8(c))
	}
	return want == unsigned || want == signed
}

// parseNumeric parses an octal field (NUL- or space-terminated) or a
// base-256 one (GNU, for large values).
func parseNumeric(b []byte) (int64, bool) {
	if len(b) > 0 && b[0]&0x80 != 0 {
		if b[0]&0x40 != 0 {
			return 0, false // negative
		}
		var x int64
		for i, c := range b {
			if i == 0 {
				c &= 0x7f
			}
			if x>>55 != 0 {
				return 0, false // overflow
			}
			x = x<<8 | int64(c)
		}
		return x, true
	}
	b = bytes.Trim(b, " \x00")
	if len(b) == 0 {
		return 0, true
	}
	var x int64
	for _, c := range b {
		if c < '0' || c > '7' || x>>60 != 0 {
			return 0, false
		}
		x = x<<3 | int64(c-'0')
	}
	return x, true
}

// cString returns b up to its first NUL.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// parsePAX applies the records of a PAX extended header ("%d %s=%s\n") to
// the next entry's name, link name and size. Records for sparse files are
// refused (Reader allows regular files only); the others are ignored.
func parsePAX(b, name, link []byte, size int64, t *tarReader) (_, _ []byte, _ int64, err error) {
	for len(b) > 0 {
		sp := bytes.IndexByte(b, ' ')
		if sp <= 0 {
			return nil, nil, 0, tar.ErrHeader
		}
		n, err := strconv.Atoi(string(b[:sp]))
		if err != nil || n <= sp+1 || n > len(b) || b[n-1] != '\n' {
			return nil, nil, 0, tar.ErrHeader
		}
		rec := b[sp+1 : n-1]
		b = b[n:]
		eq := bytes.IndexByte(rec, '=')
		if eq < 0 {
			return nil, nil, 0, tar.ErrHeader
		}
		key, val := rec[:eq], rec[eq+1:]
		switch {
		case string(key) == "path":
			if bytes.IndexByte(val, 0) >= 0 {
				return nil, nil, 0, tar.ErrHeader
			}
			name = append(t.name[:0], val...)
			t.name = name
		case string(key) == "linkpath":
			link = append(t.link[:0], val...)
			t.link = link
		case string(key) == "size":
			v, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil || v < 0 {
				return nil, nil, 0, tar.ErrHeader
			}
			size = v
		case bytes.HasPrefix(key, []byte("GNU.sparse.")):
			return nil, nil, 0, errors.New("archive/tar: sparse files are not supported")
		}
	}
	return name, link, size, nil
}
