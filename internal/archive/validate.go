package archive

import (
	"io"
)

// Summary describes a tarball that passed Validate.
type Summary struct {
	// Items is the number of unique items Next yields.
	Items int64
	// Copies is the number of versioned copies deduplicated away.
	Copies int64
	// Digest is the hex sha256 of the whole compressed stream.
	Digest string
	// ByResource counts items per group-resource ("deployments.apps", "pods").
	ByResource map[string]int64
	// FormatVersion is the content of metadata/version, e.g. "1.1.0".
	FormatVersion string
	// CopyOnlyItems counts items that exist only as versioned copies (no
	// unversioned entry). Velero writes none; NewVerifiedReader needs none.
	CopyOnlyItems int64
}

// Validate reads the whole tarball, checking everything Reader checks, and
// summarises it. It returns the first *Error, or a source read error.
func Validate(r io.Reader, lim Limits) (*Summary, error) {
	return ValidateVisit(r, lim, nil)
}

// ValidateVisit is Validate that also hands every item to visit, in the
// same pass (registration counts the items each plugin selects this way).
// visit must not keep the item after it returns. A nil visit is Validate.
func ValidateVisit(r io.Reader, lim Limits, visit func(*Item)) (*Summary, error) {
	rd, err := NewReader(r, lim)
	if err != nil {
		return nil, err
	}
	defer rd.Close() // Close never fails
	s := &Summary{ByResource: make(map[string]int64)}
	for {
		it, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		s.Items++
		s.ByResource[it.GroupResource()]++
		if visit != nil {
			visit(it)
		}
	}
	s.Copies = rd.copies
	s.CopyOnlyItems = rd.copyOnly
	s.Digest = rd.Digest()
	s.FormatVersion = rd.version
	return s, nil
}
