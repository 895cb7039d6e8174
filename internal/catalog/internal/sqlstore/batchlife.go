package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// Batched lifecycle writes and progress reads: the collector's plugin
// path settles a whole batch of resources at once.

// RemoveFinalizers implements catalog.Store: RemoveFinalizer of each key,
// in one transaction (the version counter is locked once, the rows read
// by a few queries, and every write sent in one batch).
func (s *Store) RemoveFinalizers(ctx context.Context, keys []catalog.Key, finalizer string) ([]*catalog.Resource, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var out []*catalog.Resource
	err := s.writeTx(ctx, func(q Querier) error {
		// Lock the version counter first, as every resource writer does;
		// the versions used are added at the end.
		first, err := nextVersions(ctx, q, 0)
		if err != nil {
			return err
		}
		now := s.clock()
		if err := s.checkFence(ctx, q, catalog.FenceFrom(ctx), now); err != nil {
			return err
		}
		cur, err := s.lockMany(ctx, q, keys)
		if err != nil {
			return err
		}
		out = make([]*catalog.Resource, len(keys))
		var stmts []Stmt
		used := int64(0)
		for i, k := range keys {
			r, ok := cur[k]
			if !ok {
				return fmt.Errorf("%s: %w", termtext.Quote(k.String()), catalog.ErrNotFound)
			}
			if r.Phase != catalog.PhaseDeleting {
				return transitionErr(r, r.Phase, "finalizers are removed only while Deleting")
			}
			at := slices.Index(r.Finalizers, finalizer)
			if at < 0 {
				out[i] = clone(r)
				continue
			}
			next := clone(r)
			next.Finalizers = slices.Delete(next.Finalizers, at, at+1)
			if len(next.Finalizers) == 0 {
				next.Finalizers = nil
			}
			next.ResourceVersion = first + used
			next.UpdatedAt = now
			used++
			doc, err := encode(next)
			if err != nil {
				return err
			}
			stmts = append(stmts, rowStmt(next, doc), changeStmt(catalog.EventUpdated, next.ResourceVersion, next, doc),
				auditStmt(catalog.AuditEntry{Time: now, Actor: catalog.ActorFrom(ctx), Action: "remove-finalizer",
					Kind: next.Kind, Namespace: next.Namespace, Name: next.Name, UID: next.UID,
					FromPhase: r.Phase, ToPhase: next.Phase, Reason: finalizer}))
			cur[k] = next // a key given twice sees the first removal
			out[i] = clone(next)
		}
		if used == 0 {
			return errNoop
		}
		stmts = append(stmts, Stmt{SQL: `UPDATE lethe_version SET value = $1 WHERE id = 1`, Args: []any{first + used - 1}})
		return q.ExecBatch(ctx, append(stmts, s.b.Notify()...))
	})
	if err != nil && !errors.Is(err, errNoop) {
		return nil, s.mapErr(err)
	}
	return out, nil
}

// DeleteMany implements catalog.Store: Delete of each item in one
// transaction. A refusal of one item (ErrNotFound, a *TransitionError)
// is its error; any other failure rolls everything back.
func (s *Store) DeleteMany(ctx context.Context, items []catalog.DeleteItem) ([]*catalog.Resource, []error, error) {
	for _, it := range items {
		if err := validPropagation(it.Options.Propagation); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", termtext.Quote(it.Key.String()), err)
		}
	}
	out := make([]*catalog.Resource, len(items))
	errs := make([]error, len(items))
	if len(items) == 0 {
		return out, errs, nil
	}
	var queues []string
	err := s.writeTx(ctx, func(q Querier) error {
		clear(out)
		clear(errs)
		queues = queues[:0]
		wrote := false
		for i, it := range items {
			m := s.deletion(ctx, it.Key, it.Options)
			next, _, err := s.mutateIn(ctx, q, m, nil)
			switch {
			case err == nil:
				out[i], wrote = next, true
				if m.enqueue != "" {
					queues = append(queues, m.enqueue)
				}
			case errors.Is(err, catalog.ErrNotFound) || errors.Is(err, catalog.ErrInvalidTransition):
				// Refused before anything of it was written: the
				// version lockAndGet reserved for it is given back, so
				// that the versions written stay consecutive.
				errs[i] = err
				if _, err := q.Exec(ctx, `UPDATE lethe_version SET value = value - 1 WHERE id = 1`); err != nil {
					return err
				}
			default:
				return err
			}
		}
		if !wrote {
			return errNoop
		}
		return q.ExecBatch(ctx, s.b.Notify())
	})
	if err != nil && !errors.Is(err, errNoop) {
		return nil, nil, s.mapErr(err)
	}
	for _, qn := range queues {
		s.wakeLocal(qn)
	}
	return out, errs, nil
}

// lockMany reads (and, where the database locks rows, locks) the
// resources of keys in the write transaction q, getManyChunk keys a
// query; a key with no resource is absent from the map.
func (s *Store) lockMany(ctx context.Context, q Querier, keys []catalog.Key) (map[catalog.Key]*catalog.Resource, error) {
	out := make(map[catalog.Key]*catalog.Resource, len(keys))
	for start := 0; start < len(keys); start += getManyChunk {
		chunk := keys[start:min(start+getManyChunk, len(keys))]
		sql, args := docsByKey(chunk, s.d.ForUpdate)
		if err := eachDoc(ctx, q, sql, args, func(doc string) error {
			r, err := decodeResource(doc)
			if err == nil {
				out[r.Key()] = r
			}
			return err
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// eachRow calls fn with the two text columns of each row of sql.
func eachRow(ctx context.Context, q Querier, sql string, args []any, fn func(a, b string) error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b string
		if err := rows.Scan(&a, &b); err != nil {
			return err
		}
		if err := fn(a, b); err != nil {
			return err
		}
	}
	return rows.Err()
}

// eachDoc calls fn with the one text column of each row of sql.
func eachDoc(ctx context.Context, q Querier, sql string, args []any, fn func(string) error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return err
		}
		if err := fn(doc); err != nil {
			return err
		}
	}
	return rows.Err()
}

// LoadProgressMany implements catalog.Store: LoadProgress of each uid,
// getManyChunk uids a query, in one read transaction.
func (s *Store) LoadProgressMany(ctx context.Context, uids []string) ([]*catalog.DeletionProgress, [][]catalog.ItemOutcome, error) {
	progress := make([]*catalog.DeletionProgress, len(uids))
	outcomes := make([][]catalog.ItemOutcome, len(uids))
	if len(uids) == 0 {
		return progress, outcomes, nil
	}
	at := make(map[string][]int, len(uids))
	var uniq []string // each uid once: a uid asked twice is read once
	for i, uid := range uids {
		if _, ok := at[uid]; !ok {
			uniq = append(uniq, uid)
		}
		at[uid] = append(at[uid], i)
	}
	err := s.b.ReadTx(ctx, func(q Querier) error {
		clear(progress)
		clear(outcomes)
		for start := 0; start < len(uniq); start += getManyChunk {
			chunk := uniq[start:min(start+getManyChunk, len(uniq))]
			var b strings.Builder
			args := make([]any, len(chunk))
			for i, uid := range chunk {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString("$" + strconv.Itoa(i+1))
				args[i] = uid
			}
			list := b.String()
			var have []string
			if err := eachRow(ctx, q, `SELECT uid, doc FROM deletion_progress WHERE uid IN (`+list+`)`, args, func(uid, doc string) error {
				var p catalog.DeletionProgress
				if err := json.Unmarshal([]byte(doc), &p); err != nil {
					return fmt.Errorf("catalog: corrupt progress: %w", err)
				}
				for n, i := range at[uid] {
					c := p
					if n > 0 {
						c.Counts = maps.Clone(p.Counts) // a uid asked twice gets its own copy
					}
					progress[i] = &c
				}
				have = append(have, uid)
				return nil
			}); err != nil {
				return err
			}
			if len(have) == 0 {
				continue
			}
			if err := eachRow(ctx, q, `SELECT uid, doc FROM item_outcomes WHERE uid IN (`+list+`) ORDER BY uid, ordinal, plugin`, args, func(uid, od string) error {
				var o catalog.ItemOutcome
				if err := json.Unmarshal([]byte(od), &o); err != nil {
					return fmt.Errorf("catalog: corrupt item outcome: %w", err)
				}
				for _, i := range at[uid] {
					if progress[i] != nil {
						outcomes[i] = append(outcomes[i], o)
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, s.mapErr(err)
	}
	return progress, outcomes, nil
}
