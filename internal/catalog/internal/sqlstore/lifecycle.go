package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// Lifecycle: Schedule, Undelete, Delete, RemoveFinalizer and Purge, the due
// queue, and tombstones.

func transitionErr(cur *catalog.Resource, to catalog.Phase, reason string) error {
	return &catalog.TransitionError{Key: cur.Key(), From: cur.Phase, To: to, Reason: reason}
}

func validPropagation(p catalog.Propagation) error {
	switch p {
	case "", catalog.PropagationForeground, catalog.PropagationBackground, catalog.PropagationOrphan:
		return nil
	}
	return fmt.Errorf("%w: propagation policy %q (want Foreground, Background or Orphan)", catalog.ErrInvalid, p)
}

// Schedule implements catalog.Store. It records the scheduling time in the
// lethe.io/deletion-scheduled-at annotation (RFC 3339).
func (s *Store) Schedule(ctx context.Context, k catalog.Key, opts catalog.ScheduleOptions) (*catalog.Resource, error) {
	if opts.Delay < 0 {
		return nil, fmt.Errorf("%w: negative deletion delay %s", catalog.ErrInvalid, opts.Delay)
	}
	if err := validPropagation(opts.Propagation); err != nil {
		return nil, err
	}
	return s.mutate(ctx, mutation{key: k, action: "schedule", actor: catalog.ActorFrom(ctx), reason: opts.Reason, rootDetails: true,
		guard: func(ctx context.Context, q Querier, cur *catalog.Resource) error {
			return s.heldByPeers(ctx, q, cur, catalog.PhaseScheduled)
		},
		apply: func(cur *catalog.Resource, now time.Time) (*catalog.Resource, error) {
			if cur.Phase != catalog.PhaseActive {
				return nil, transitionErr(cur, catalog.PhaseScheduled, "only an Active resource can be scheduled for deletion")
			}
			due := now.Add(opts.Delay)
			cur.Phase = catalog.PhaseScheduled
			cur.DeletionDueAt = &due
			cur.PropagationPolicy = opts.Propagation
			cur.DeletionRoot = opts.Root
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations[catalog.AnnotationDeletionScheduledAt] = now.Format(time.RFC3339Nano)
			return cur, nil
		}})
}

// Delete implements catalog.Store. The propagation policy is opts'
// (else the one given to Schedule, else Foreground); opts.Finalizers are
// added to the existing ones.
func (s *Store) Delete(ctx context.Context, k catalog.Key, opts catalog.DeleteOptions) (*catalog.Resource, error) {
	if err := validPropagation(opts.Propagation); err != nil {
		return nil, err
	}
	return s.mutate(ctx, s.deletion(ctx, k, opts))
}

// deletion is Delete's mutation.
func (s *Store) deletion(ctx context.Context, k catalog.Key, opts catalog.DeleteOptions) mutation {
	action := "delete"
	if opts.Force {
		action = "force-delete"
	}
	if opts.Action != "" {
		action = opts.Action
	}
	return mutation{key: k, action: action, actor: catalog.ActorFrom(ctx), reason: opts.Reason, rootDetails: true,
		enqueue: opts.Enqueue,
		guard: func(ctx context.Context, q Querier, cur *catalog.Resource) error {
			return s.heldByPeers(ctx, q, cur, catalog.PhaseDeleting)
		},
		apply: func(cur *catalog.Resource, now time.Time) (*catalog.Resource, error) {
			if opts.OnlyIfScheduled && cur.Phase != catalog.PhaseScheduled {
				return nil, transitionErr(cur, catalog.PhaseDeleting, "no longer Scheduled (undeleted meanwhile?)")
			}
			switch cur.Phase {
			case catalog.PhaseActive:
			case catalog.PhaseScheduled:
				if !opts.Force && cur.DeletionDueAt != nil && now.Before(*cur.DeletionDueAt) {
					return nil, transitionErr(cur, catalog.PhaseDeleting,
						fmt.Sprintf("the deletion delay runs until %s; use force to skip it", cur.DeletionDueAt.Format(time.RFC3339)))
				}
			default:
				return nil, transitionErr(cur, catalog.PhaseDeleting, "already Deleting")
			}
			cur.PropagationPolicy = cmpOr(opts.Propagation, cur.PropagationPolicy, catalog.PropagationForeground)
			if opts.Root != nil {
				cur.DeletionRoot = opts.Root
			}
			cur.Phase = catalog.PhaseDeleting
			cur.DeletionDueAt = nil
			ts := now
			cur.DeletionTimestamp = &ts
			for _, f := range opts.Finalizers {
				if !slices.Contains(cur.Finalizers, f) {
					cur.Finalizers = append(cur.Finalizers, f)
				}
			}
			return cur, nil
		}}
}

func cmpOr[T comparable](vs ...T) T {
	var zero T
	for _, v := range vs {
		if v != zero {
			return v
		}
	}
	return zero
}

// RemoveFinalizer implements catalog.Store. Removing a finalizer that is
// not there is a no-op that returns the resource unchanged (finalizer
// controllers may run more than once); on a resource that is not Deleting
// it is a *TransitionError.
func (s *Store) RemoveFinalizer(ctx context.Context, k catalog.Key, finalizer string) (*catalog.Resource, error) {
	return s.mutate(ctx, mutation{key: k, action: "remove-finalizer", actor: catalog.ActorFrom(ctx), reason: finalizer,
		apply: func(cur *catalog.Resource, _ time.Time) (*catalog.Resource, error) {
			if cur.Phase != catalog.PhaseDeleting {
				return nil, transitionErr(cur, cur.Phase, "finalizers are removed only while Deleting")
			}
			i := slices.Index(cur.Finalizers, finalizer)
			if i < 0 {
				return nil, errNoop
			}
			cur.Finalizers = slices.Delete(cur.Finalizers, i, i+1)
			if len(cur.Finalizers) == 0 {
				cur.Finalizers = nil
			}
			return cur, nil
		}})
}

// Purge implements catalog.Store. The resource must be Deleting; Force
// only skips the remaining finalizers (and is audited as "force-purge").
// The DELETED event carries the last state with the purge's version.
func (s *Store) Purge(ctx context.Context, k catalog.Key, opts catalog.PurgeOptions) error {
	if len(opts.Details) > 0 && !json.Valid(opts.Details) {
		return fmt.Errorf("%w: purge details are not valid JSON", catalog.ErrInvalid)
	}
	err := s.writeTx(ctx, func(q Querier) error {
		ver, cur, err := s.lockAndGet(ctx, q, 1, k)
		if err != nil {
			return err
		}
		// Dated once the version lock is held (see mutate).
		now := s.clock()
		if err := s.checkFence(ctx, q, catalog.FenceFrom(ctx), now); err != nil {
			return err
		}
		if cur.Phase != catalog.PhaseDeleting {
			return transitionErr(cur, catalog.PhasePurged, "only a Deleting resource can be purged")
		}
		var pre []Stmt
		if i := slices.Index(cur.Finalizers, opts.Finalizer); opts.Finalizer != "" && i >= 0 {
			// RemoveFinalizer's writes, at this version; the purge takes
			// the next one (the counter's lock is held).
			next := clone(cur)
			next.Finalizers = slices.Delete(next.Finalizers, i, i+1)
			if len(next.Finalizers) == 0 {
				next.Finalizers = nil
			}
			next.ResourceVersion = ver
			next.UpdatedAt = now
			doc, err := encode(next)
			if err != nil {
				return err
			}
			pre = []Stmt{
				changeStmt(catalog.EventUpdated, ver, next, doc),
				auditStmt(catalog.AuditEntry{Time: now, Actor: catalog.ActorFrom(ctx), Action: "remove-finalizer",
					Kind: next.Kind, Namespace: next.Namespace, Name: next.Name, UID: next.UID,
					FromPhase: cur.Phase, ToPhase: next.Phase, Reason: opts.Finalizer}),
				{SQL: `UPDATE lethe_version SET value = value + 1 WHERE id = 1`},
			}
			cur, ver = next, ver+1
		}
		if len(cur.Finalizers) > 0 && !opts.Force {
			return transitionErr(cur, catalog.PhasePurged,
				fmt.Sprintf("finalizers remain: %s (use force to purge anyway)", strings.Join(cur.Finalizers, ", ")))
		}
		action := "purge"
		if opts.Force {
			action = "force-purge"
		}
		ts := catalog.Tombstone{Key: k, UID: cur.UID, PurgedAt: now, Actor: catalog.ActorFrom(ctx), Reason: opts.Reason, Details: opts.Details,
			DeletionRoot: cur.DeletionRoot}
		tsDoc, err := encode(ts)
		if err != nil {
			return err
		}
		last := clone(cur)
		last.ResourceVersion = ver
		lastDoc, err := encode(last)
		if err != nil {
			return err
		}
		ch := changeStmt(catalog.EventDeleted, ver, last, lastDoc)
		details := opts.Details
		if opts.Force && len(cur.Finalizers) > 0 {
			m := map[string]any{"remainingFinalizers": cur.Finalizers}
			if len(opts.Details) > 0 {
				m["details"] = opts.Details
			}
			details, _ = json.Marshal(m)
		}
		if err := q.ExecBatch(ctx, append(append(pre, []Stmt{
			{SQL: `DELETE FROM owner_edges WHERE dependent_uid = $1`, Args: []any{cur.UID}},
			{SQL: `DELETE FROM reference_edges WHERE referrer_uid = $1`, Args: []any{cur.UID}},
			{SQL: `DELETE FROM resources WHERE uid = $1`, Args: []any{cur.UID}},
			{SQL: `INSERT INTO tombstones (uid, kind, namespace, name, purged_at, doc) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (uid) DO UPDATE SET purged_at = excluded.purged_at, doc = excluded.doc`,
				Args: []any{cur.UID, k.Kind, k.Namespace, k.Name, nanos(now), tsDoc}},
			ch,
			auditStmt(catalog.AuditEntry{Time: now, Actor: catalog.ActorFrom(ctx), Action: action, Kind: k.Kind, Namespace: k.Namespace,
				Name: k.Name, UID: cur.UID, FromPhase: cur.Phase, ToPhase: catalog.PhasePurged, Reason: opts.Reason, Details: details}),
		}...), s.b.Notify()...)); err != nil {
			return err
		}
		return s.peerEdgesGone(ctx, q, []string{cur.UID}, now)
	})
	return s.mapErr(err)
}

// DueScheduled implements catalog.Store.
func (s *Store) DueScheduled(ctx context.Context, t time.Time, limit int) ([]*catalog.Resource, error) {
	if limit <= 0 {
		limit = listLimitDefault
	}
	return s.queryResources(ctx, s.b.Reader(),
		`SELECT doc FROM resources WHERE due_at IS NOT NULL AND due_at <= $1 ORDER BY due_at, uid LIMIT $2`, t.UnixNano(), limit)
}

// NextDue implements catalog.Store.
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	var n int64
	err := s.b.Reader().QueryRow(ctx, `SELECT due_at FROM resources WHERE due_at IS NOT NULL ORDER BY due_at LIMIT 1`).Scan(&n)
	if errors.Is(err, ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, s.mapErr(err)
	}
	return time.Unix(0, n).UTC(), true, nil
}

// GetTombstone implements catalog.Store: the newest tombstone of the key.
func (s *Store) GetTombstone(ctx context.Context, k catalog.Key) (*catalog.Tombstone, error) {
	var doc string
	err := s.b.Reader().QueryRow(ctx, `SELECT doc FROM tombstones WHERE kind = $1 AND namespace = $2 AND name = $3
ORDER BY purged_at DESC LIMIT 1`, k.Kind, k.Namespace, k.Name).Scan(&doc)
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("tombstone of %s: %w", termtext.Quote(k.String()), catalog.ErrNotFound)
	}
	if err != nil {
		return nil, s.mapErr(err)
	}
	var t catalog.Tombstone
	if err := json.Unmarshal([]byte(doc), &t); err != nil {
		return nil, fmt.Errorf("catalog: corrupt tombstone: %w", err)
	}
	// The key is the row's: a batch purge on PostgreSQL stores the
	// document without it.
	t.Key = k
	return &t, nil
}
