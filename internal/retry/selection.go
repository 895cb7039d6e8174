package retry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"

	"github.com/lethehq/lethe/internal/catalog"
)

// Selection is a frozen set of retry rows: the query that chose them,
// and the rows it matched then, by ID, with their count and hash. A bulk
// retry or discard acts on exactly these rows, however many match the
// query by the time it runs (Sidekiq's "Delete All" acted on rows the
// user never saw).
type Selection struct {
	Filter catalog.RetryFilter
	IDs    []int64
	Hash   string
}

// Count is how many rows the selection holds.
func (s *Selection) Count() int { return len(s.IDs) }

// SelectionHash is the hash of a set of row IDs: SHA-256 of the sorted
// decimal IDs, one a line, in hex.
func SelectionHash(ids []int64) string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	h := sha256.New()
	for _, id := range sorted {
		h.Write(strconv.AppendInt(nil, id, 10))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Select freezes the rows that match f now (f.Limit is ignored: a
// selection holds every matching row, not one page of them).
func Select(ctx context.Context, st catalog.RetryQueue, f catalog.RetryFilter) (*Selection, error) {
	f.Limit = 0
	rows, err := st.ListRetries(ctx, f)
	if err != nil {
		return nil, err
	}
	s := &Selection{Filter: f, IDs: make([]int64, 0, len(rows))}
	for _, r := range rows {
		s.IDs = append(s.IDs, r.ID)
	}
	s.Hash = SelectionHash(s.IDs)
	return s, nil
}

// ErrSelectionChanged is returned when a selection's IDs no longer hash
// to its hash, or a caller's count or hash is not the selection's.
var ErrSelectionChanged = errors.New("the selection is not the one shown")

// RowOutcome is what a bulk action did to one row.
type RowOutcome struct {
	ID int64 `json:"id"`
	// Error is why the row was left as it is (empty: done).
	Error string `json:"error,omitempty"`
}

// Bulk actions.
const (
	BulkRetry   = "retry"
	BulkDiscard = "discard"
)

// ApplySelection runs action (BulkRetry or BulkDiscard) on each row of
// s, and only on those, after checking that count and hash are s's (what
// the caller was shown) and that s's IDs still hash to s.Hash. A row that
// cannot take the action (already discarded, held by a worker, gone) is
// reported and left as it is; the others go on.
func (q *Queue) ApplySelection(ctx context.Context, s *Selection, action string, count int, hash string) ([]RowOutcome, error) {
	if count != s.Count() || hash != s.Hash || SelectionHash(s.IDs) != s.Hash {
		return nil, ErrSelectionChanged
	}
	var do func(ctx context.Context, id int64, dryRun bool) (*catalog.RetryRow, error)
	switch action {
	case BulkRetry:
		do = q.RetryNow
	case BulkDiscard:
		do = q.Discard
	default:
		return nil, errors.New("bulk action " + strconv.Quote(action) + ": use retry or discard")
	}
	out := make([]RowOutcome, 0, len(s.IDs))
	for _, id := range s.IDs {
		o := RowOutcome{ID: id}
		if _, err := do(ctx, id, false); err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			o.Error = err.Error()
		}
		out = append(out, o)
	}
	return out, nil
}
