package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEndlessListingFailsTheSync: an S3 endpoint whose listing never ends
// (every page truncated, with a new continuation token) makes `backup
// sync` fail with one line once the listing passes its bound (10,000
// pages), instead of listing for ever (the check that the bucket answers
// included); nothing is imported or concluded.
func TestEndlessListingFailsTheSync(t *testing.T) {
	t.Parallel()
	var pages atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			return
		}
		if r.URL.Query().Get("list-type") != "2" {
			http.NotFound(w, r)
			return
		}
		n := pages.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated><NextContinuationToken>page-%d</NextContinuationToken></ListBucketResult>`, n)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t)
	e.extra = append(e.extra, "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_EC2_METADATA_DISABLED=true")
	start := time.Now()
	r := e.run("--storage", "s3://bucket?endpoint="+srv.URL+"&region=us-east-1&use_path_style=true", "backup", "sync")
	requireOneErrorLine(t, r, "the listing went past its bounds: more than 10000 pages; nothing is concluded from it")
	require.LessOrEqual(t, pages.Load(), int64(10_002), "the check, then at most 10,000 pages")
	t.Logf("refused after %d pages in %s", pages.Load(), time.Since(start).Round(time.Millisecond))
	require.Empty(t, e.list())
}
