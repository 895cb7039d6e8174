package blobstore_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore"
)

// TestDrippingS3EndpointIsCut: an S3 endpoint that drips its answers (a
// byte at a time, or its headers never) held a sync for ever. A GET whose
// body brings fewer than MinReadBytes in a ReadWindow fails with
// ErrSlowRead, not resumed; a HEAD whose headers do not come within
// ResponseHeaderTimeout fails.
func TestDrippingS3EndpointIsCut(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	const size = 400 // 20 s at a byte every 50 ms
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			select { // headers that do not come for 20 s
			case <-time.After(20 * time.Second):
			case <-stop:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Header().Set("ETag", `"x"`)
		w.Header().Set("Last-Modified", "Thu, 01 Jan 2026 00:00:00 GMT")
		w.WriteHeader(http.StatusOK)
		if strings.Contains(r.URL.Path, "fast") {
			_, _ = w.Write(bytes.Repeat([]byte("x"), size))
			return
		}
		for range size {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-time.After(50 * time.Millisecond):
			case <-stop:
				return
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	s, err := blobstore.OpenConfig(t.Context(), "s3://bucket?endpoint="+srv.URL+"&region=us-east-1&use_path_style=true",
		&blobstore.Config{S3: blobstore.S3Timeouts{ResponseHeaderTimeout: 500 * time.Millisecond, ReadWindow: 500 * time.Millisecond, MinReadBytes: 100}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	start := time.Now()
	rc, err := s.Open(t.Context(), "backups/a/a.tar.gz")
	require.NoError(t, err)
	_, err = io.ReadAll(rc)
	_ = rc.Close()
	require.ErrorIs(t, err, blobstore.ErrSlowRead)
	require.Less(t, time.Since(start), 10*time.Second, "the dripping read was not cut in time")

	// A reader that stops between reads (a plugin call between two
	// items) is not taken for a slow endpoint: only time inside Read
	// counts.
	rc, err = s.Open(t.Context(), "backups/fast/fast.tar.gz")
	require.NoError(t, err)
	buf := make([]byte, 10)
	_, err = io.ReadFull(rc, buf)
	require.NoError(t, err)
	time.Sleep(1200 * time.Millisecond)
	rest, err := io.ReadAll(rc)
	_ = rc.Close()
	require.NoError(t, err)
	require.Len(t, rest, size-10)

	start = time.Now()
	_, err = s.Stat(t.Context(), "backups/a/a.tar.gz")
	require.Error(t, err)
	require.Less(t, time.Since(start), 15*time.Second, "the headers that do not come were waited for")
}
