package archive

import (
	"errors"
	"strconv"
)

// ErrHostile matches every *Error: the tarball is hostile, corrupt or not a
// Velero backup, and must be rejected as a whole. An error from the source
// reader itself (a network failure, say) never matches it.
var ErrHostile = errors.New("hostile or invalid backup tarball")

// Kinds of *Error, for errors.Is. Each *Error matches exactly one of them and
// ErrHostile.
var (
	ErrUnsafePath     = errors.New("unsafe path")
	ErrUnsafeName     = errors.New("control character in a name")
	ErrEntryType      = errors.New("forbidden entry type")
	ErrTooLarge       = errors.New("over size cap")
	ErrTooManyEntries = errors.New("too many entries")
	ErrBomb           = errors.New("decompression bomb")
	ErrTruncated      = errors.New("truncated stream")
	ErrCorrupt        = errors.New("corrupt stream")
	ErrInvalidJSON    = errors.New("invalid JSON")
	ErrDuplicate      = errors.New("duplicate item")
	ErrMismatch       = errors.New("metadata disagrees with path")
	ErrLayout         = errors.New("not Velero's layout")
	ErrVersion        = errors.New("missing or unsupported format version")
)

// Error rejects a tarball. Its message is one line naming the entry.
type Error struct {
	// Entry is the tar entry at fault, or the last entry read when the fault
	// is in the stream itself; empty before the first entry.
	Entry string
	// Reason says what is wrong, for an operator.
	Reason string
	// Kind is one of the Err* kinds above.
	Kind error
	// Err is the underlying cause, if any.
	Err error
}

func (e *Error) Error() string {
	if e.Entry == "" {
		return "backup tarball rejected: " + e.Reason
	}
	return "backup tarball rejected: entry " + strconv.Quote(e.Entry) + ": " + e.Reason
}

// Unwrap returns the kind and the cause.
func (e *Error) Unwrap() []error {
	errs := []error{e.Kind}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Is reports whether target is ErrHostile.
func (e *Error) Is(target error) bool { return target == ErrHostile }

func newErr(entry string, kind error, reason string) *Error {
	return &Error{Entry: entry, Reason: reason, Kind: kind}
}
