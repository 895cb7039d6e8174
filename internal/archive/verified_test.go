package archive_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/archive/archivetest"
)

func readKeys(t *testing.T, rd *archive.Reader) []string {
	t.Helper()
	var keys []string
	for {
		it, err := rd.Next()
		if err == io.EOF {
			return keys
		}
		require.NoError(t, err)
		require.EqualValues(t, len(keys), it.Ordinal)
		keys = append(keys, it.Key())
	}
}

// TestVerifiedReaderYieldsWhatValidateAccepted: on a Velero-style tarball
// (each item followed by its preferred-version copy) the verified reader
// yields exactly the items, ordinals and digest of the full reader.
func TestVerifiedReaderYieldsWhatValidateAccepted(t *testing.T) {
	specs := make([]archivetest.ItemSpec, 0, 300)
	for i := range 300 {
		specs = append(specs, archivetest.SpecN(i, 200))
	}
	var buf bytes.Buffer
	require.NoError(t, archivetest.Write(&buf, specs, archivetest.Options{PreferredVersionCopies: true}))
	sum, err := archive.Validate(bytes.NewReader(buf.Bytes()), archive.Limits{})
	require.NoError(t, err)
	require.Zero(t, sum.CopyOnlyItems)
	require.EqualValues(t, 300, sum.Copies)

	full, err := archive.NewReader(bytes.NewReader(buf.Bytes()), archive.Limits{})
	require.NoError(t, err)
	want := readKeys(t, full)
	verified, err := archive.NewVerifiedReader(bytes.NewReader(buf.Bytes()), archive.Limits{})
	require.NoError(t, err)
	got := readKeys(t, verified)
	require.Equal(t, want, got)
	require.Len(t, got, 300)
	require.Equal(t, sum.Digest, verified.Digest())
}

// TestValidateCountsCopyOnlyItems: the fixture with an item present only as
// copies must be reported, so that callers do not use the verified reader
// on it (which would skip that item).
func TestValidateCountsCopyOnlyItems(t *testing.T) {
	matches, err := filepath.Glob("testdata/preferredversion/*")
	require.NoError(t, err)
	require.NotEmpty(t, matches, "fixture with version copies")
	var found bool
	for _, m := range matches {
		f, err := os.Open(m)
		require.NoError(t, err)
		sum, err := archive.Validate(f, archive.Limits{})
		f.Close()
		require.NoError(t, err, m)
		if sum.CopyOnlyItems > 0 {
			found = true
		}
	}
	require.True(t, found, "the copies fixture holds an item that exists only as copies")
}

// TestVerifiedReaderMemoryIsFlat: without the fingerprint table the live
// heap does not grow with the number of items at all.
func TestVerifiedReaderMemoryIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~10 MiB of tarballs")
	}
	peak := func(items int) uint64 {
		var buf bytes.Buffer
		require.NoError(t, archivetest.WriteN(&buf, items, 1024))
		rd, err := archive.NewVerifiedReader(bytes.NewReader(buf.Bytes()), archive.Limits{})
		require.NoError(t, err)
		var heap uint64
		for n := 0; ; n++ {
			_, err := rd.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			if n%1000 == 999 {
				heap = max(heap, liveHeap()-uint64(buf.Cap()))
			}
		}
		return heap
	}
	small, large := peak(4_000), peak(40_000)
	t.Logf("live heap: 4k items %.2f MiB, 40k items %.2f MiB", float64(small)/(1<<20), float64(large)/(1<<20))
	require.Less(t, large, small+256<<10, "the verified reader's heap grows with the tarball's size")
}
