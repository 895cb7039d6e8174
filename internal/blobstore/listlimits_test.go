package blobstore_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore"
)

// endlessS3 is a hostile S3 endpoint: every ListObjectsV2 page says
// IsTruncated, with a new continuation token, and keys new keys (or none
// when empty); delay slows each page. It counts the pages it served.
func endlessS3(t *testing.T, keys int, delay time.Duration) (url string, pages *atomic.Int64) {
	t.Helper()
	pages = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			return // HeadBucket: the bucket answers
		}
		if r.URL.Query().Get("list-type") != "2" {
			http.NotFound(w, r)
			return
		}
		n := pages.Add(1)
		time.Sleep(delay)
		var b strings.Builder
		fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><Prefix>backups/</Prefix><KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated><NextContinuationToken>page-%d</NextContinuationToken>`, keys, n)
		for i := range keys {
			fmt.Fprintf(&b, `<Contents><Key>backups/b-%d-%d/b-%d-%d.tar.gz</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>"x"</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>`, n, i, n, i)
		}
		b.WriteString(`</ListBucketResult>`)
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write([]byte(b.String()))
	}))
	t.Cleanup(srv.Close)
	return "s3://bucket?endpoint=" + srv.URL + "&region=us-east-1&use_path_style=true", pages
}

// TestEndlessListingIsBounded: a store that never stops listing (an S3
// endpoint whose pages are all truncated) is stopped at a bound (pages,
// keys or time) with one error wrapping ErrListingTooLong, never listed
// for ever nor taken for a complete listing; asking whether it answers
// takes one request.
func TestEndlessListingIsBounded(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, tc := range []struct {
		name      string
		keys      int
		delay     time.Duration
		limits    blobstore.ListLimits
		want      string
		maxPages  int64
		withinSec float64
	}{
		{"empty pages for ever", 0, 0, blobstore.ListLimits{MaxPages: 50, Timeout: 15 * time.Second}, "more than 50 pages", 52, 30},
		{"keys for ever", 7, 0, blobstore.ListLimits{MaxKeys: 100, Timeout: 15 * time.Second}, "more than 100 keys", 16, 30},
		{"key names past their bytes", 7, 0, blobstore.ListLimits{MaxKeyBytes: 2000, Timeout: 15 * time.Second}, "more than 2000 bytes of key names", 13, 30},
		{"slow pages for ever", 1, 20 * time.Millisecond, blobstore.ListLimits{Timeout: 500 * time.Millisecond}, "it did not end within 500ms", 30, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, pages := endlessS3(t, tc.keys, tc.delay)
			s, err := blobstore.OpenConfig(t.Context(), url, &blobstore.Config{List: tc.limits})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			// The bucket answers: one request says so (blob's IsAccessible
			// would keep asking while the pages are empty).
			require.NoError(t, blobstore.Check(t.Context(), s))
			require.EqualValues(t, 1, pages.Load())
			start := time.Now()
			objs, err := s.List(t.Context(), "backups/")
			require.ErrorIs(t, err, blobstore.ErrListingTooLong)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "nothing is concluded from it")
			require.NotContains(t, err.Error(), "\n")
			require.Nil(t, objs)
			require.LessOrEqual(t, pages.Load(), tc.maxPages)
			require.Less(t, time.Since(start).Seconds(), tc.withinSec)
		})
	}
}

// TestListingWithinItsBoundsIsWhole: the bounds do not cut a listing
// short: a file:// folder with as many keys as the bound lists whole; one
// more is refused.
func TestListingWithinItsBoundsIsWhole(t *testing.T) {
	dir := t.TempDir()
	for i := range 20 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("k%02d", i)), []byte("x"), 0o600))
	}
	s, err := blobstore.OpenConfig(t.Context(), fileURL(dir), &blobstore.Config{List: blobstore.ListLimits{MaxKeys: 20}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	objs, err := s.List(t.Context(), "")
	require.NoError(t, err)
	require.Len(t, objs, 20)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "k20"), []byte("x"), 0o600))
	_, err = s.List(t.Context(), "")
	require.ErrorIs(t, err, blobstore.ErrListingTooLong)
	require.ErrorContains(t, err, "more than 20 keys")
}

// TestListingIsBoundedByTheBytesOfItsKeyNames: a million keys is not the
// only bound on what a listing holds in memory: keys of long names reach
// the bound on their bytes first (S3 allows 1,024 bytes a key). A listing
// whose names add up to exactly the bound lists whole.
func TestListingIsBoundedByTheBytesOfItsKeyNames(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("n", 200)
	for i := range 5 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s%02d", long, i)), []byte("x"), 0o600))
	}
	s, err := blobstore.OpenConfig(t.Context(), fileURL(dir), &blobstore.Config{List: blobstore.ListLimits{MaxKeyBytes: 5 * 202}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	objs, err := s.List(t.Context(), "")
	require.NoError(t, err)
	require.Len(t, objs, 5)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "k"), []byte("x"), 0o600))
	_, err = s.List(t.Context(), "")
	require.ErrorIs(t, err, blobstore.ErrListingTooLong)
	require.ErrorContains(t, err, "more than 1010 bytes of key names")
	require.Greater(t, blobstore.DefaultMaxListKeyBytes, 100*blobstore.DefaultMaxListKeys/2, "the default must hold a million Velero keys of 50 bytes")
}
