package archive

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTarReaderReadsWhatArchiveTarReads: the formats archive/tar writes
// (USTAR with a prefix, PAX, GNU long names) give the same names, types,
// link names and bodies through tarReader as through archive/tar.
func TestTarReaderReadsWhatArchiveTarReads(t *testing.T) {
	long := "resources/" + strings.Repeat("x", 120) + ".example.com/namespaces/ns/" + strings.Repeat("n", 90) + ".json"
	prefixed := "resources/" + strings.Repeat("p", 60) + "/namespaces/ns/" + strings.Repeat("q", 60) + ".json"
	for _, format := range []tar.Format{tar.FormatUnknown, tar.FormatUSTAR, tar.FormatPAX, tar.FormatGNU} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		entries := []*tar.Header{
			{Name: "metadata/version", Typeflag: tar.TypeReg, Size: 5, Mode: 0o644},
			{Name: "resources/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: prefixed, Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
			{Name: long, Typeflag: tar.TypeReg, Size: 700, Mode: 0o644},
			{Name: "resources/link.json", Typeflag: tar.TypeSymlink, Linkname: strings.Repeat("l", 120), Mode: 0o777},
			{Name: "empty", Typeflag: tar.TypeReg, Mode: 0o644},
		}
		for i, h := range entries {
			h.Format = format
			if format == tar.FormatUSTAR && (h.Name == long || len(h.Linkname) > 100) {
				continue // USTAR cannot hold it
			}
			require.NoError(t, tw.WriteHeader(h), "entry %d", i)
			_, err := tw.Write(bytes.Repeat([]byte{byte('a' + i)}, int(h.Size)))
			require.NoError(t, err)
		}
		require.NoError(t, tw.Close())

		want := tar.NewReader(bytes.NewReader(buf.Bytes()))
		got := newTarReader(bytes.NewReader(buf.Bytes()))
		for {
			wh, werr := want.Next()
			gh, gerr := got.Next()
			if werr == io.EOF {
				require.Equal(t, io.EOF, gerr, "format %s", format)
				break
			}
			require.NoError(t, werr)
			require.NoError(t, gerr, "format %s, entry %s", format, wh.Name)
			require.Equal(t, wh.Name, gh.Name, "format %s", format)
			require.Equal(t, wh.Typeflag, gh.Typeflag, "format %s, %s", format, wh.Name)
			require.Equal(t, wh.Linkname, gh.Linkname, "format %s, %s", format, wh.Name)
			require.Equal(t, wh.Size, gh.Size, "format %s, %s", format, wh.Name)
			wb, err := io.ReadAll(want)
			require.NoError(t, err)
			gb, err := io.ReadAll(got)
			require.NoError(t, err)
			require.Equal(t, wb, gb)
		}
	}
}

func TestTarReaderRefusesABadChecksumAndATruncatedStream(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 600, Mode: 0o644}))
	_, _ = tw.Write(make([]byte, 600))
	require.NoError(t, tw.Close())
	bad := bytes.Clone(buf.Bytes())
	bad[10] ^= 1
	_, err := newTarReader(bytes.NewReader(bad)).Next()
	require.ErrorIs(t, err, tar.ErrHeader)

	tr := newTarReader(bytes.NewReader(buf.Bytes()[:700]))
	_, err = tr.Next()
	require.NoError(t, err)
	_, err = io.ReadAll(tr)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}
