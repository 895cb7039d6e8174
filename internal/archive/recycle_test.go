package archive

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// readAllBodies returns a copy of every item's body, by ordinal.
func readAllBodies(t *testing.T, tarball []byte, verified bool) [][]byte {
	t.Helper()
	rd := openRecycleReader(t, tarball, verified)
	var out [][]byte
	for {
		it, err := rd.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		require.EqualValues(t, len(out), it.Ordinal)
		out = append(out, bytes.Clone(it.Object))
	}
}

func openRecycleReader(t *testing.T, tarball []byte, verified bool) *Reader {
	t.Helper()
	open := NewReader
	if verified {
		open = NewVerifiedReader
	}
	rd, err := open(bytes.NewReader(tarball), Limits{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rd.Close() })
	return rd
}

// TestRecycleReusesBodiesAndSparesHeldOnes reads items on one goroutine
// and recycles them on another, some time later, as a deletion does; a
// few items are held to the end and never recycled. A body must not
// change while its item is held (checked when it is recycled, and for the
// held ones at the end), and recycled chunks must be reused.
func TestRecycleReusesBodiesAndSparesHeldOnes(t *testing.T) {
	const n, size = 3000, 1024
	var buf bytes.Buffer
	require.NoError(t, archivetest.WriteN(&buf, n, size))
	for _, verified := range []bool{false, true} {
		want := readAllBodies(t, buf.Bytes(), verified)
		require.Len(t, want, n)

		rd := openRecycleReader(t, buf.Bytes(), verified)
		held := func(ord int64) bool { return ord < 10 || ord%500 == 250 }
		chunks := map[*bodyChunk]bool{}
		items := make(chan *Item, 256) // the lag between reading and recycling
		done := make(chan []*Item)
		go func() {
			var keep []*Item
			for it := range items {
				if !bytes.Equal(want[it.Ordinal], it.Object) {
					t.Errorf("item %d's body changed while it was held", it.Ordinal)
				}
				if held(it.Ordinal) {
					keep = append(keep, it)
					continue
				}
				rd.Recycle(it)
				if it.Object != nil {
					t.Errorf("item %d: Recycle left Object set", it.Ordinal)
				}
				rd.Recycle(it) // twice: nothing more happens
			}
			done <- keep
		}()
		for {
			it, err := rd.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			chunks[it.chunk] = true
			items <- it
		}
		close(items)
		keep := <-done
		require.Len(t, keep, 10+n/500)
		for _, it := range keep {
			require.Equal(t, want[it.Ordinal], it.Object, "held item %d", it.Ordinal)
		}
		// Without reuse, the bodies need n*size/slabChunk chunks (~47).
		require.Less(t, len(chunks), 20, "verified=%v: chunks are not reused", verified)
	}
}

// TestRecycleIgnoresForeignItems: an item another reader returned, or one
// decoded elsewhere, is left alone.
func TestRecycleIgnoresForeignItems(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, archivetest.WriteN(&buf, 3, 64))
	a := openRecycleReader(t, buf.Bytes(), true)
	b := openRecycleReader(t, buf.Bytes(), true)
	it, err := a.Next()
	require.NoError(t, err)
	b.Recycle(it)
	require.NotNil(t, it.Object)
	b.Recycle(&Item{Object: []byte("x")})
	a.Recycle(it)
	require.Nil(t, it.Object)
}
