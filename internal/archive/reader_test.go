package archive_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// readAll reads every item of a tarball.
func readAll(t testing.TB, data []byte) ([]*archive.Item, *archive.Reader) {
	t.Helper()
	rd, err := archive.NewReader(bytes.NewReader(data), archive.Limits{})
	require.NoError(t, err)
	var items []*archive.Item
	for {
		it, err := rd.Next()
		if err == io.EOF {
			return items, rd
		}
		require.NoError(t, err)
		items = append(items, it)
	}
}

func build(t testing.TB, items []archivetest.ItemSpec, opts archivetest.Options) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, archivetest.Write(&buf, items, opts))
	return buf.Bytes()
}

func specs(n int) []archivetest.ItemSpec {
	out := make([]archivetest.ItemSpec, n)
	for i := range out {
		out[i] = archivetest.SpecN(i, 300)
	}
	return out
}

func TestReaderYieldsEveryItemOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts archivetest.Options
	}{
		{"gzip", archivetest.Options{}},
		{"zstd", archivetest.Options{Compression: archivetest.Zstd}},
		{"gzip with preferred-version copies", archivetest.Options{PreferredVersionCopies: true}},
		{"zstd with preferred-version copies", archivetest.Options{Compression: archivetest.Zstd, PreferredVersionCopies: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := specs(50)
			data := build(t, want, tc.opts)
			items, rd := readAll(t, data)
			require.Len(t, items, len(want))
			for i, it := range items {
				w := want[i]
				require.Equal(t, int64(i), it.Ordinal)
				require.Equal(t, w.Key(), it.Key())
				require.Equal(t, w.Path(), it.Path)
				require.Equal(t, w.Group, it.Group)
				require.Equal(t, "v1", it.Version)
				require.Equal(t, w.Resource, it.Resource)
				require.Equal(t, w.Kind, it.Kind)
				require.Equal(t, w.Namespace, it.Namespace)
				require.Equal(t, w.Name, it.Name)
				require.Equal(t, w.Labels, it.Labels)
				require.Equal(t, archivetest.AppendJSON(nil, w), it.Object)
			}
			sum := sha256.Sum256(data)
			require.Equal(t, hex.EncodeToString(sum[:]), rd.Digest())
			_, err := rd.Next()
			require.ErrorIs(t, err, io.EOF, "EOF is sticky")
		})
	}
}

func TestItemsOwnTheirObjects(t *testing.T) {
	data := build(t, specs(20), archivetest.Options{PreferredVersionCopies: true})
	items, _ := readAll(t, data)
	for i, it := range items {
		require.Equal(t, archivetest.AppendJSON(nil, archivetest.SpecN(i, 300)), it.Object, "item %d was overwritten by a later read", i)
	}
}

func TestValidateSummary(t *testing.T) {
	data := build(t, specs(70), archivetest.Options{PreferredVersionCopies: true})
	sum, err := archive.Validate(bytes.NewReader(data), archive.Limits{})
	require.NoError(t, err)
	digest := sha256.Sum256(data)
	require.Equal(t, &archive.Summary{
		Items:  70,
		Copies: 70,
		Digest: hex.EncodeToString(digest[:]),
		ByResource: map[string]int64{
			"pods": 10, "configmaps": 10, "deployments.apps": 10, "persistentvolumeclaims": 10,
			"volumesnapshots.snapshot.storage.k8s.io": 10, "persistentvolumes": 10,
			"clusterroles.rbac.authorization.k8s.io": 10,
		},
		FormatVersion: "1.1.0",
	}, sum)
}

func TestSourceErrorIsNotHostile(t *testing.T) {
	data := build(t, specs(200), archivetest.Options{})
	boom := errors.New("connection reset")
	r := io.MultiReader(bytes.NewReader(data[:len(data)/2]), &errReader{boom})
	_, err := archive.Validate(r, archive.Limits{})
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, archive.ErrHostile)
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

func TestAbandonedReaderStopsItsGoroutine(t *testing.T) {
	data := build(t, specs(2000), archivetest.Options{})
	func() {
		rd, err := archive.NewReader(bytes.NewReader(data), archive.Limits{})
		require.NoError(t, err)
		_, err = rd.Next()
		require.NoError(t, err)
		// Dropped without Close, mid-stream.
	}()
	for range 5 {
		runtime.GC()
	}
	goleak.VerifyNone(t)
}

func TestCloseStopsItsGoroutine(t *testing.T) {
	data := build(t, specs(2000), archivetest.Options{Compression: archivetest.Zstd})
	rd, err := archive.NewReader(bytes.NewReader(data), archive.Limits{})
	require.NoError(t, err)
	_, err = rd.Next()
	require.NoError(t, err)
	require.NoError(t, rd.Close())
	_, err = rd.Next()
	require.Error(t, err)
	goleak.VerifyNone(t)
}

// gatedSource serves data in 64-byte reads. Its second Read, the first
// one after NewReader's own peek, reports on entered and waits for gate.
type gatedSource struct {
	r       io.Reader
	reads   int
	entered chan struct{}
	gate    chan struct{}
}

func (s *gatedSource) Read(p []byte) (int, error) {
	s.reads++
	if s.reads == 2 {
		close(s.entered)
		<-s.gate
	}
	return s.r.Read(p[:min(len(p), 64)])
}

// TestCloseWaitsForTheSourceRead pins that Close returns only once the
// read-ahead goroutine has left the source's Read, so a caller may close
// the source right after Close without racing it (a blob reader's Close
// and Read are not safe together).
func TestCloseWaitsForTheSourceRead(t *testing.T) {
	data := build(t, specs(2000), archivetest.Options{})
	src := &gatedSource{r: bytes.NewReader(data), entered: make(chan struct{}), gate: make(chan struct{})}
	rd, err := archive.NewReader(src, archive.Limits{})
	require.NoError(t, err)
	<-src.entered // the read-ahead goroutine is inside Read
	closed := make(chan struct{})
	go func() { _ = rd.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while the source was still being read")
	case <-time.After(50 * time.Millisecond):
	}
	close(src.gate)
	<-closed
	goleak.VerifyNone(t)
}
