package blobstore

import (
	"context"
	"os"
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
		ok, err := s.bucket.IsAccessible(ctx)
		switch {
		case err != nil:
			return &UnavailableError{Location: s.url, Cause: oneLine(err)}
		case !ok:
			return &UnavailableError{Location: s.url, Cause: "the bucket does not exist"}
		}
	}
	return nil
}
