package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// ErrDownloadBroken is returned by a read from an s3:// object whose
// download broke and could not be resumed within ResumeAttempts.
var ErrDownloadBroken = errors.New("blobstore: download broken")

// Resuming a broken download: how many ranged GETs in a row may fail
// before the read gives up, and the backoff between them (doubling from
// ResumeBackoff, capped at ResumeBackoffMax). Variables so that tests can
// shorten them.
var (
	ResumeAttempts   = 6
	ResumeBackoff    = 200 * time.Millisecond
	ResumeBackoffMax = 5 * time.Second
)

// resumingReader streams an s3:// object with one GET, and resumes a
// download that breaks mid-stream (a reset connection, an EOF before the
// object's length, a 5xx) with a ranged GET from the byte it reached,
// pinned to the object's ETag (If-Match), so that a resumed stream is the
// same object or fails. Attempts are bounded and backed off; a read that
// makes progress resets the count.
type resumingReader struct {
	ctx    context.Context
	bucket *blob.Bucket
	key    string
	r      *blob.Reader
	size   int64
	etag   string
	off    int64
	fails  int
	err    error // sticky
}

func newResumingReader(ctx context.Context, bucket *blob.Bucket, key string, r *blob.Reader) *resumingReader {
	rr := &resumingReader{ctx: ctx, bucket: bucket, key: key, r: r, size: r.Size()}
	var out s3.GetObjectOutput
	if r.As(&out) {
		rr.etag = aws.ToString(out.ETag)
	}
	return rr
}

func (rr *resumingReader) Read(p []byte) (int, error) {
	if rr.err != nil {
		return 0, rr.err
	}
	for {
		n, err := rr.r.Read(p)
		rr.off += int64(n)
		if n > 0 {
			rr.fails = 0
		}
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, io.EOF) && rr.off >= rr.size:
			return n, io.EOF
		case errors.Is(err, io.EOF):
			err = io.ErrUnexpectedEOF // the connection ended before the length
		}
		if n > 0 {
			// Hand over what arrived; the next Read resumes.
			if rerr := rr.resume(err); rerr != nil {
				rr.err = rerr
			}
			return n, nil
		}
		if rerr := rr.resume(err); rerr != nil {
			rr.err = rerr
			return 0, rerr
		}
	}
}

// resume replaces the broken reader with a ranged GET from rr.off, after a
// backoff, retrying transient failures up to ResumeAttempts in a row.
func (rr *resumingReader) resume(cause error) error {
	_ = rr.r.Close()
	rr.r = nil
	for {
		if !transient(rr.ctx, cause) {
			return fmt.Errorf("blobstore: reading %q at byte %d of %d: %w", rr.key, rr.off, rr.size, cause)
		}
		rr.fails++
		if rr.fails > ResumeAttempts {
			return fmt.Errorf("%w: reading %q stopped at byte %d of %d after %d attempts to resume: %w",
				ErrDownloadBroken, rr.key, rr.off, rr.size, ResumeAttempts, cause)
		}
		wait := min(ResumeBackoff<<(rr.fails-1), ResumeBackoffMax)
		select {
		case <-rr.ctx.Done():
			return context.Cause(rr.ctx)
		case <-time.After(wait):
		}
		r, err := rr.bucket.NewRangeReader(rr.ctx, rr.key, rr.off, rr.size-rr.off, &blob.ReaderOptions{
			BeforeRead: func(as func(any) bool) error {
				var in *s3.GetObjectInput
				if rr.etag != "" && as(&in) {
					in.IfMatch = aws.String(rr.etag)
				}
				return nil
			},
		})
		if err == nil {
			rr.r = r
			return nil
		}
		cause = err
	}
}

// transient says whether a failed read is worth resuming: not when the run
// is cancelled, nor when the object is gone, changed (If-Match failed) or
// forbidden.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrSlowRead) {
		return false
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.PermissionDenied, gcerrors.InvalidArgument, gcerrors.FailedPrecondition,
		gcerrors.Unimplemented, gcerrors.Canceled, gcerrors.DeadlineExceeded:
		return false
	}
	return true
}

func (rr *resumingReader) Close() error {
	if rr.r == nil {
		return nil
	}
	err := rr.r.Close()
	rr.r = nil
	return err
}
