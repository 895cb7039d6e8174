package blobstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/blobstore/s3test"
)

// fastResume shortens the backoff of resumed downloads for a test.
func fastResume(t *testing.T) {
	t.Helper()
	a, b, m := blobstore.ResumeAttempts, blobstore.ResumeBackoff, blobstore.ResumeBackoffMax
	blobstore.ResumeBackoff, blobstore.ResumeBackoffMax = time.Millisecond, 5*time.Millisecond
	t.Cleanup(func() { blobstore.ResumeAttempts, blobstore.ResumeBackoff, blobstore.ResumeBackoffMax = a, b, m })
}

// flakyS3 is a real S3 server behind a proxy that can break downloads,
// holding one object of 3 MiB of random bytes.
func flakyS3(t *testing.T) (*s3test.Proxy, blobstore.Store, []byte) {
	t.Helper()
	fastResume(t)
	p := s3test.NewProxy(t, s3test.StartServer(t))
	st, err := blobstore.Open(t.Context(), p.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	require.NoError(t, st.Put(t.Context(), "backups/b/b.tar.gz", bytes.NewReader(data)))
	p.Reset()
	return p, st, data
}

func readAll(ctx context.Context, st blobstore.Store, key string) ([]byte, error) {
	rc, err := st.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestDownloadIsOneGET(t *testing.T) {
	p, st, data := flakyS3(t)
	got, err := readAll(t.Context(), st, "backups/b/b.tar.gz")
	require.NoError(t, err)
	require.Equal(t, data, got)
	require.Equal(t, []string{""}, p.GETs())
}

// TestBrokenDownloadResumesWithARangedGET: connections cut mid-body and
// 503s on the way; the reader resumes from the byte it reached, and the
// bytes are exactly the object's.
func TestBrokenDownloadResumesWithARangedGET(t *testing.T) {
	p, st, data := flakyS3(t)
	p.CutNextGETs(1<<20, 1000)
	got, err := readAll(t.Context(), st, "backups/b/b.tar.gz")
	require.NoError(t, err)
	require.Equal(t, data, got)
	require.Equal(t, []string{"", "bytes=1048576-3145727", "bytes=1049576-3145727"}, p.GETs())

	// 503s on the resumed GETs: retried with backoff (the S3 client retries
	// a few itself), and the download still completes.
	p.Reset()
	p.CutNextGETs(2 << 20)
	p.UnavailableOnResume(4)
	got, err = readAll(t.Context(), st, "backups/b/b.tar.gz")
	require.NoError(t, err)
	require.Equal(t, data, got)
	gets := p.GETs()
	require.Greater(t, len(gets), 5, "the 503s were answered: %q", gets)
	for _, g := range gets[1:] {
		require.Equal(t, "bytes=2097152-3145727", g, "resumed from the byte it reached: %q", gets)
	}
}

func TestDownloadThatKeepsBreakingFailsWithErrDownloadBroken(t *testing.T) {
	p, st, _ := flakyS3(t)
	blobstore.ResumeAttempts = 3
	p.CutNextGETs(100, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	_, err := readAll(t.Context(), st, "backups/b/b.tar.gz")
	require.ErrorIs(t, err, blobstore.ErrDownloadBroken)
	require.ErrorContains(t, err, "byte 100 of 3145728")
	require.Len(t, p.GETs(), 4, "one GET and 3 attempts to resume")
}
