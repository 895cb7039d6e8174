package backup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// NotFoundError says that no resource has the key: it never existed, or it
// was purged (Purged is then its tombstone). Every command that names a
// resource says it the same way, and the CLI exits with its "not found"
// code. errors.Is(err, catalog.ErrNotFound) holds.
type NotFoundError struct {
	Key    catalog.Key
	Purged *catalog.Tombstone
	// Hint, when set, ends the message: where else the name exists.
	Hint string
}

func (e *NotFoundError) Error() string {
	hint := ""
	if e.Hint != "" {
		hint = "; " + e.Hint
	}
	if e.Purged != nil {
		return fmt.Sprintf("%s was purged at %s by %s%s", describeKey(e.Key),
			e.Purged.PurgedAt.Local().Format(time.RFC3339), termtext.Quote(e.Purged.Actor), hint)
	}
	return describeKey(e.Key) + " not found" + hint
}

// Unwrap makes errors.Is(err, catalog.ErrNotFound) true.
func (e *NotFoundError) Unwrap() error { return catalog.ErrNotFound }

// describeKey names a resource the way users type it: backup "nightly",
// Database "shop/orders".
func describeKey(k catalog.Key) string {
	kind := k.Kind
	if kind == Kind {
		kind = "backup"
	}
	name := k.Name
	if k.Namespace != "" {
		name = k.Namespace + "/" + k.Name
	}
	return fmt.Sprintf("%s %q", termtext.Quote(kind), name)
}

// Reader is what Get reads from the catalog: a resource, or the tombstone
// of a purged one.
type Reader interface {
	Get(ctx context.Context, k catalog.Key) (*catalog.Resource, error)
	GetTombstone(ctx context.Context, k catalog.Key) (*catalog.Tombstone, error)
}

// Get reads a resource; a missing one is a *NotFoundError, which says
// when and by whom it was purged if it was.
func Get(ctx context.Context, st Reader, k catalog.Key) (*catalog.Resource, error) {
	r, err := st.Get(ctx, k)
	if errors.Is(err, catalog.ErrNotFound) {
		nf := &NotFoundError{Key: k}
		if ts, terr := st.GetTombstone(ctx, k); terr == nil {
			nf.Purged = ts
		}
		return nil, nf
	}
	return r, err
}
