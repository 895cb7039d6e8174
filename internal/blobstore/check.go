package blobstore

import (
	"context"
	"os"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Checker is a Store that can say whether it is reachable now. Stores
// that wrap another (a counting wrapper in a test) implement it by
// asking the wrapped one.
type Checker interface {
	Check(ctx context.Context) error
}

// Check says whether s can be read now: a file:// store whose folder is
// still there, an s3:// bucket that answers. The error wraps
// ErrUnavailable and names the location, without credentials.
//
// Unknown is not absent: a file:// folder that was unmounted or removed
// lists as empty, and an empty listing must never be taken for "every
// backup is gone". Whoever concludes something from a listing checks
// first.
func Check(ctx context.Context, s Store) error {
	if c, ok := s.(Checker); ok {
		return c.Check(ctx)
	}
	return nil
}

// Check implements Checker.
func (s *store) Check(ctx context.Context) error {
	switch s.kind {
	case kindFile:
		fi, err := os.Stat(s.dir)
		if err != nil || !fi.IsDir() {
			return &UnavailableError{Location: s.url, Cause: "the folder does not exist"}
		}
	case kindS3:
		ok, err := s.accessible(ctx)
		switch {
		case err != nil:
			return &UnavailableError{Location: s.url, Cause: oneLine(err)}
		case !ok:
			return &UnavailableError{Location: s.url, Cause: "the bucket does not exist"}
		}
	}
	return nil
}

// accessible says whether the s3:// bucket answers: one listing request
// of one key, as blob.Bucket.IsAccessible makes, but never more (that
// one keeps asking for as long as pages come back empty and truncated,
// which a hostile endpoint can do for ever), and within the listing's
// time bound.
func (s *store) accessible(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.limits.withDefaults().Timeout)
	defer cancel()
	requests := 0
	_, _, err := s.bucket.ListPage(ctx, blob.FirstPageToken, 1, &blob.ListOptions{BeforeList: func(func(any) bool) error {
		if requests++; requests > 1 {
			return errListPages // the first request was answered
		}
		return nil
	}})
	switch {
	case err == nil, requests > 1:
		return true, nil
	case gcerrors.Code(err) == gcerrors.NotFound:
		return false, nil
	}
	return false, err
}
