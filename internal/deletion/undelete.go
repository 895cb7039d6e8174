package deletion

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// Undelete cancels a scheduled deletion (see the package function).
func (d *Deleter) Undelete(ctx context.Context, name string) (*catalog.Resource, error) {
	r, _, err := Undelete(ctx, d.cfg.Store, name, d.now())
	return r, err
}

// UndeleteCatalog is the part of the catalog Undelete uses.
type UndeleteCatalog interface {
	catalog.Resources
	catalog.Lifecycle
}

// AnnotationTTLCleared records when undelete removed an expired TTL.
const AnnotationTTLCleared = "lethe.io/ttl-cleared-by-undelete"

// Undelete returns a Scheduled backup to Active. A backup whose TTL has
// already expired loses its expiry first (ttlCleared), or the TTL
// controller would request its deletion again at once: the person who
// undeleted it wants it kept. It needs no plugins.
func Undelete(ctx context.Context, st UndeleteCatalog, name string, now time.Time) (r *catalog.Resource, ttlCleared bool, err error) {
	ctx = catalog.WithDefaultActor(ctx, "cli")
	for range 3 {
		if r, err = backup.Get(ctx, st, backup.Key(name)); err != nil {
			return nil, false, err
		}
		switch r.Phase {
		case catalog.PhaseActive:
			return nil, false, fmt.Errorf("backup %s has no deletion scheduled", name)
		case catalog.PhaseDeleting:
			return nil, false, fmt.Errorf("backup %s is already being deleted (since %s): its plugins have acted, so it cannot be undeleted",
				name, r.DeletionTimestamp.Local().Format(time.RFC3339))
		}
		b, err := backup.FromResource(r)
		if err != nil {
			return nil, false, err
		}
		policy, err := scheduledByPolicy(ctx, st, r)
		if err != nil {
			return nil, false, err
		}

		expired := b.Spec.ExpiresAt != nil && !b.Spec.ExpiresAt.After(now)
		if !expired && policy == "" {
			r, err = st.Undelete(ctx, r.Key(), "undelete requested")
			return r, false, err
		}
		reason := "undelete requested"
		if expired {
			b.Spec.ExpiresAt, b.Spec.TTL = nil, 0
			if r.Annotations == nil {
				r.Annotations = map[string]string{}
			}
			r.Annotations[AnnotationTTLCleared] = now.UTC().Format(time.RFC3339)
			if err := b.Encode(); err != nil {
				return nil, false, err
			}
			reason += "; the expired TTL was removed"
		}
		if policy != "" {
			holdFromPolicy(r, policy, now)
			reason += "; held from RetentionPolicy " + policy + " (lethe.io/retain=true), which had scheduled it"
		}
		if _, err = st.Update(ctx, r); errors.Is(err, catalog.ErrConflict) {
			continue
		} else if err != nil {
			return nil, false, err
		}
		r, err = st.Undelete(ctx, r.Key(), reason)
		return r, expired, err
	}
	return nil, false, fmt.Errorf("backup %s: %w", name, catalog.ErrConflict)
}
