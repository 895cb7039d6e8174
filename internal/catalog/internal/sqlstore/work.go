package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

// WorkColumns is the column list ClaimSQL must return, in order.
const WorkColumns = `id, queue, key, payload, run_at, holder, lease_expires_at, attempts, last_error, created_at, epoch`

func scanWork(r interface{ Scan(...any) error }) (*catalog.WorkItem, error) {
	var (
		w                              catalog.WorkItem
		payload                        string
		runAt, leaseExpires, createdAt int64
	)
	if err := r.Scan(&w.ID, &w.Queue, &w.Key, &payload, &runAt, &w.Holder, &leaseExpires, &w.Attempts, &w.LastError, &createdAt, &w.Epoch); err != nil {
		return nil, err
	}
	if payload != "" {
		w.Payload = json.RawMessage(payload)
	}
	w.RunAt, w.LeaseExpiresAt, w.CreatedAt = fromNanos(runAt), fromNanos(leaseExpires), fromNanos(createdAt)
	return &w, nil
}

func (s *Store) queryWork(ctx context.Context, q Querier, sql string, args ...any) ([]*catalog.WorkItem, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*catalog.WorkItem
	for rows.Next() {
		w, err := scanWork(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

func validTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: lease ttl must be positive, got %s", catalog.ErrInvalid, ttl)
	}
	return nil
}

// Enqueue implements catalog.Store. A zero RunAt means now.
func (s *Store) Enqueue(ctx context.Context, w catalog.WorkItem) (*catalog.WorkItem, error) {
	if w.Queue == "" || w.Key == "" {
		return nil, fmt.Errorf("%w: a work item needs a queue and a key", catalog.ErrInvalid)
	}
	if len(w.Payload) > 0 && !json.Valid(w.Payload) {
		return nil, fmt.Errorf("%w: work item payload is not valid JSON", catalog.ErrInvalid)
	}
	now := s.clock()
	runAt := w.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	w.RunAt = runAt
	var out *catalog.WorkItem
	err := s.writeTx(ctx, func(q Querier) error {
		st := workStmt(w, now)
		// The insert finds the key taken, or adds it; the read that
		// follows may, on PostgreSQL (READ COMMITTED), no longer find
		// an item that another writer completed in between: insert
		// again. Each round either reads the item or inserts it anew.
		for round := 1; ; round++ {
			if _, err := q.Exec(ctx, st.SQL, st.Args...); err != nil {
				return err
			}
			var err error
			out, err = scanWork(q.QueryRow(ctx, `SELECT `+WorkColumns+` FROM work_items WHERE queue = $1 AND key = $2`, w.Queue, w.Key))
			if errors.Is(err, ErrNoRows) && round < 10 {
				continue
			}
			if errors.Is(err, ErrNoRows) {
				return fmt.Errorf("work item %s %s: completed by another writer as often as it was queued, %d times", w.Queue, w.Key, round)
			}
			if err != nil || out.Holder != "" || out.RunAt.After(now) {
				return err
			}
			break
		}
		return s.b.NotifyWake(ctx, q, w.Queue)
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	if out.Holder == "" && !out.RunAt.After(now) {
		s.wakeLocal(w.Queue)
	}
	return out, nil
}

// workStmt adds the work item w, unless its queue already holds one for
// its key (Enqueue is idempotent). A zero RunAt is now.
func workStmt(w catalog.WorkItem, now time.Time) Stmt {
	runAt := w.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	return Stmt{SQL: `INSERT INTO work_items (queue, key, payload, run_at, available_at, created_at) VALUES ($1, $2, $3, $4, $4, $5)
ON CONFLICT (queue, key) DO NOTHING`, Args: []any{w.Queue, w.Key, string(w.Payload), runAt.UnixNano(), now.UnixNano()}}
}

// NextAvailable implements catalog.Store, from the claim index.
func (s *Store) NextAvailable(ctx context.Context, queue string) (time.Time, bool, error) {
	var n *int64
	if err := s.b.Reader().QueryRow(ctx, `SELECT MIN(available_at) FROM work_items WHERE queue = $1`, queue).Scan(&n); err != nil {
		return time.Time{}, false, s.mapErr(err)
	}
	if n == nil {
		return time.Time{}, false, nil
	}
	return time.Unix(0, *n).UTC(), true, nil
}

// Claim implements catalog.Store. Items are taken in the order they
// became available (their run time, or the expiry of the lease taken
// over), then by id; a claim increments Attempts and Epoch.
func (s *Store) Claim(ctx context.Context, queue, holder string, ttl time.Duration, limit int) ([]*catalog.WorkItem, error) {
	if holder == "" {
		return nil, fmt.Errorf("%w: empty lease holder", catalog.ErrInvalid)
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1
	}
	now := s.clock()
	var out []*catalog.WorkItem
	err := s.writeTx(ctx, func(q Querier) error {
		args := []any{holder, now.Add(ttl).UnixNano(), queue, now.UnixNano(), limit}
		var err error
		out, err = s.claimWork(ctx, q, args)
		return err
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].RunAt.Equal(out[j].RunAt) {
			return out[i].RunAt.Before(out[j].RunAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// claimWork runs the dialect's claim and marks the items whose expired
// lease it took over from another holder.
func (s *Store) claimWork(ctx context.Context, q Querier, args []any) ([]*catalog.WorkItem, error) {
	holder := args[0].(string)
	if s.d.ClaimPrevSQL != "" {
		prev := map[int64]string{}
		rows, err := q.Query(ctx, s.d.ClaimPrevSQL, args[2], args[3], args[4])
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id int64
			var h string
			if err := rows.Scan(&id, &h); err != nil {
				rows.Close()
				return nil, err
			}
			prev[id] = h
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out, err := s.queryWork(ctx, q, s.d.ClaimSQL, args...)
		for _, w := range out {
			w.TakenOverFrom = takenOverFrom(prev[w.ID], holder)
		}
		return out, err
	}
	rows, err := q.Query(ctx, s.d.ClaimSQL, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*catalog.WorkItem
	for rows.Next() {
		var prev string
		w, err := scanWork(scanPlus{rows, &prev})
		if err != nil {
			return nil, err
		}
		w.TakenOverFrom = takenOverFrom(prev, holder)
		out = append(out, w)
	}
	return out, rows.Err()
}

// scanPlus scans one more column after workColumns.
type scanPlus struct {
	r    interface{ Scan(...any) error }
	last any
}

func (s scanPlus) Scan(dest ...any) error { return s.r.Scan(append(dest, s.last)...) }

// takenOverFrom is the holder a claim took the lease over from: the
// previous holder, if there was one and it is not the claimer. A claim
// never takes a live lease of another holder, so a previous holder that
// is still set let its lease expire without releasing it.
func takenOverFrom(prev, holder string) string {
	if prev == holder {
		return ""
	}
	return prev
}

// ClaimKey implements catalog.Store. It ignores RunAt (an explicit claim
// runs the item now). Claiming an item the holder already holds renews it
// under a new epoch, which fences off the earlier claim.
func (s *Store) ClaimKey(ctx context.Context, queue, key, holder string, ttl time.Duration) (*catalog.WorkItem, error) {
	if holder == "" {
		return nil, fmt.Errorf("%w: empty lease holder", catalog.ErrInvalid)
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	now := s.clock()
	var out *catalog.WorkItem
	err := s.writeTx(ctx, func(q Querier) error {
		cur, err := scanWork(q.QueryRow(ctx, `SELECT `+WorkColumns+` FROM work_items WHERE queue = $1 AND key = $2`+s.d.ForUpdate, queue, key))
		if errors.Is(err, ErrNoRows) {
			return fmt.Errorf("work item %s %s: %w", queue, key, catalog.ErrNotFound)
		}
		if err != nil {
			return err
		}
		live := cur.Holder != "" && cur.LeaseExpiresAt.After(now)
		if live && cur.Holder != holder {
			return &catalog.LeaseHeldError{Queue: queue, Key: key, Holder: cur.Holder, ExpiresAt: cur.LeaseExpiresAt}
		}
		inc := 1
		if live {
			inc = 0
		}
		out, err = scanWork(q.QueryRow(ctx, `UPDATE work_items SET holder = $1, lease_expires_at = $2, available_at = $2, attempts = attempts + $3,
  epoch = epoch + 1
WHERE id = $4 RETURNING `+WorkColumns, holder, now.Add(ttl).UnixNano(), inc, cur.ID))
		if err == nil {
			out.TakenOverFrom = takenOverFrom(cur.Holder, holder)
		}
		return err
	})
	return out, s.mapErr(err)
}

// Renew implements catalog.Store. The claim must be the latest and its
// lease still live.
func (s *Store) Renew(ctx context.Context, f *catalog.Fence, ttl time.Duration) (*catalog.WorkItem, error) {
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	if err := validFence(f); err != nil {
		return nil, err
	}
	now := s.clock()
	var out *catalog.WorkItem
	err := s.writeTx(ctx, func(q Querier) error {
		var err error
		out, err = scanWork(q.QueryRow(ctx, `UPDATE work_items SET lease_expires_at = $1, available_at = $1
WHERE id = $2 AND holder = $3 AND epoch = $4 AND lease_expires_at > $5 RETURNING `+WorkColumns,
			now.Add(ttl).UnixNano(), f.ID, f.Holder, f.Epoch, now.UnixNano()))
		if errors.Is(err, ErrNoRows) {
			return lostErr(f)
		}
		return err
	})
	return out, s.mapErr(err)
}

// Release implements catalog.Store. It succeeds while nobody has claimed
// the item again, even after the lease expired. A zero runAt means now.
func (s *Store) Release(ctx context.Context, f *catalog.Fence, runAt time.Time, lastErr string) error {
	if err := validFence(f); err != nil {
		return err
	}
	now := s.clock()
	if runAt.IsZero() {
		runAt = now
	}
	due := !runAt.After(now)
	err := s.writeTx(ctx, func(q Querier) error {
		n, err := q.Exec(ctx, `UPDATE work_items SET holder = '', lease_expires_at = 0, run_at = $1, available_at = $1, last_error = $2
WHERE id = $3 AND holder = $4 AND epoch = $5`, runAt.UnixNano(), lastErr, f.ID, f.Holder, f.Epoch)
		if err == nil && n == 0 {
			err = lostErr(f)
		}
		if err != nil || !due {
			return err
		}
		return s.b.NotifyWake(ctx, q, f.Queue)
	})
	if err == nil && due {
		s.wakeLocal(f.Queue)
	}
	return s.mapErr(err)
}

// Complete implements catalog.Store; like Release, it succeeds while
// nobody has claimed the item again.
func (s *Store) Complete(ctx context.Context, f *catalog.Fence) error {
	if err := validFence(f); err != nil {
		return err
	}
	err := s.writeTx(ctx, func(q Querier) error {
		n, err := q.Exec(ctx, `DELETE FROM work_items WHERE id = $1 AND holder = $2 AND epoch = $3`, f.ID, f.Holder, f.Epoch)
		if err == nil && n == 0 {
			err = lostErr(f)
		}
		return err
	})
	return s.mapErr(err)
}

func validFence(f *catalog.Fence) error {
	if f == nil || f.ID == 0 || f.Holder == "" {
		return fmt.Errorf("%w: a fence needs the work item's id and holder", catalog.ErrInvalid)
	}
	return nil
}

func lostErr(f *catalog.Fence) error {
	return fmt.Errorf("work item %d (%s %s), holder %s, epoch %d: %w", f.ID, f.Queue, f.Key, f.Holder, f.Epoch, catalog.ErrLeaseLost)
}

// checkFence fails with ErrLeaseLost unless the claim f names is the work
// item's latest and its lease is live at now. It runs inside the write
// transaction it guards and locks the work item's row against a claim
// until that transaction ends; a nil f is no fence.
func (s *Store) checkFence(ctx context.Context, q Querier, f *catalog.Fence, now time.Time) error {
	if f == nil {
		return nil
	}
	if err := validFence(f); err != nil {
		return err
	}
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM work_items WHERE id = $1 AND holder = $2 AND epoch = $3 AND lease_expires_at > $4`+s.d.ForShare,
		f.ID, f.Holder, f.Epoch, now.UnixNano()).Scan(&one)
	if errors.Is(err, ErrNoRows) {
		return lostErr(f)
	}
	return err
}

// GetWork implements catalog.Store.
func (s *Store) GetWork(ctx context.Context, queue, key string) (*catalog.WorkItem, error) {
	w, err := scanWork(s.b.Reader().QueryRow(ctx, `SELECT `+WorkColumns+` FROM work_items WHERE queue = $1 AND key = $2`, queue, key))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("work item %s %s: %w", queue, key, catalog.ErrNotFound)
	}
	return w, s.mapErr(err)
}

// ListWork implements catalog.Store, in (runAt, id) order.
func (s *Store) ListWork(ctx context.Context, queue string) ([]*catalog.WorkItem, error) {
	out, err := s.queryWork(ctx, s.b.Reader(), `SELECT `+WorkColumns+` FROM work_items WHERE queue = $1 ORDER BY run_at, id`, queue)
	return out, s.mapErr(err)
}

// --- deletion progress ---

// SaveCheckpoint implements catalog.Store.
func (s *Store) SaveCheckpoint(ctx context.Context, c catalog.Checkpoint) error {
	if c.Progress.UID == "" {
		return fmt.Errorf("%w: checkpoint without a uid", catalog.ErrInvalid)
	}
	now := s.clock()
	p := c.Progress
	p.UpdatedAt = now
	doc, err := encode(p)
	if err != nil {
		return err
	}
	stmts := []Stmt{{SQL: `INSERT INTO deletion_progress (uid, doc) VALUES ($1, $2) ON CONFLICT (uid) DO UPDATE SET doc = excluded.doc`,
		Args: []any{p.UID, doc}}}
	for _, o := range c.Upsert {
		o.UID = p.UID
		o.UpdatedAt = now
		od, err := encode(o)
		if err != nil {
			return err
		}
		stmts = append(stmts, Stmt{SQL: `INSERT INTO item_outcomes (uid, ordinal, plugin, doc) VALUES ($1, $2, $3, $4)
ON CONFLICT (uid, ordinal, plugin) DO UPDATE SET doc = excluded.doc`, Args: []any{p.UID, o.Ordinal, o.Plugin, od}})
	}
	for _, o := range c.Settle {
		stmts = append(stmts, Stmt{SQL: `DELETE FROM item_outcomes WHERE uid = $1 AND ordinal = $2 AND plugin = $3`,
			Args: []any{p.UID, o.Ordinal, o.Plugin}})
	}
	fence := c.Fence
	if fence == nil {
		fence = catalog.FenceFrom(ctx)
	}
	err = s.writeTx(ctx, func(q Querier) error {
		if err := s.checkFence(ctx, q, fence, now); err != nil {
			return fmt.Errorf("checkpoint of %s: %w", p.UID, err)
		}
		return q.ExecBatch(ctx, stmts)
	})
	return s.mapErr(err)
}

// LoadProgress implements catalog.Store; outcomes are ordered by ordinal
// and plugin. ErrNotFound if there is no progress for uid.
func (s *Store) LoadProgress(ctx context.Context, uid string) (*catalog.DeletionProgress, []catalog.ItemOutcome, error) {
	var p catalog.DeletionProgress
	var outs []catalog.ItemOutcome
	err := s.b.ReadTx(ctx, func(q Querier) error {
		var doc string
		if err := q.QueryRow(ctx, `SELECT doc FROM deletion_progress WHERE uid = $1`, uid).Scan(&doc); err != nil {
			if errors.Is(err, ErrNoRows) {
				return fmt.Errorf("progress of %s: %w", uid, catalog.ErrNotFound)
			}
			return err
		}
		if err := json.Unmarshal([]byte(doc), &p); err != nil {
			return fmt.Errorf("catalog: corrupt progress: %w", err)
		}
		rows, err := q.Query(ctx, `SELECT doc FROM item_outcomes WHERE uid = $1 ORDER BY ordinal, plugin`, uid)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var od string
			if err := rows.Scan(&od); err != nil {
				return err
			}
			var o catalog.ItemOutcome
			if err := json.Unmarshal([]byte(od), &o); err != nil {
				return fmt.Errorf("catalog: corrupt item outcome: %w", err)
			}
			outs = append(outs, o)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, nil, s.mapErr(err)
	}
	return &p, outs, nil
}

// DeleteProgress implements catalog.Store (a no-op when there is none).
func (s *Store) DeleteProgress(ctx context.Context, uid string) error {
	return s.mapErr(s.writeTx(ctx, func(q Querier) error {
		return q.ExecBatch(ctx, []Stmt{
			{SQL: `DELETE FROM item_outcomes WHERE uid = $1`, Args: []any{uid}},
			{SQL: `DELETE FROM deletion_progress WHERE uid = $1`, Args: []any{uid}},
		})
	}))
}

// --- audit ---

// AppendAudit implements catalog.Store. A zero Time means now.
func (s *Store) AppendAudit(ctx context.Context, e catalog.AuditEntry) error {
	if e.Action == "" {
		return fmt.Errorf("%w: audit entry without an action", catalog.ErrInvalid)
	}
	if len(e.Details) > 0 && !json.Valid(e.Details) {
		return fmt.Errorf("%w: audit details are not valid JSON", catalog.ErrInvalid)
	}
	if e.Time.IsZero() {
		e.Time = s.clock()
	}
	return s.mapErr(s.writeTx(ctx, func(q Querier) error {
		st := auditStmt(e)
		_, err := q.Exec(ctx, st.SQL, st.Args...)
		return err
	}))
}

// ListAudit implements catalog.Store. Entries come oldest first (newest
// last, in append order). With a Limit, it returns the newest Limit
// entries that match, still oldest first.
func (s *Store) ListAudit(ctx context.Context, f catalog.AuditFilter) ([]catalog.AuditEntry, error) {
	sql := `SELECT id, ts, actor, action, kind, namespace, name, uid, from_phase, to_phase, reason, details FROM audit WHERE 1 = 1`
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		sql += fmt.Sprintf(" AND "+cond, len(args))
	}
	if f.Kind != "" {
		add("kind = $%d", f.Kind)
	}
	if f.Namespace != "" {
		add("namespace = $%d", f.Namespace)
	}
	if f.Name != "" {
		add("name = $%d", f.Name)
	}
	if f.UID != "" {
		add("uid = $%d", f.UID)
	}
	if !f.Since.IsZero() {
		add("ts >= $%d", f.Since.UnixNano())
	}
	sql += " ORDER BY id DESC"
	if f.Limit > 0 {
		args = append(args, f.Limit)
		sql += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	rows, err := s.b.Reader().Query(ctx, sql, args...)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	var out []catalog.AuditEntry
	for rows.Next() {
		var (
			e            catalog.AuditEntry
			ts           int64
			from, to, dt string
		)
		if err := rows.Scan(&e.ID, &ts, &e.Actor, &e.Action, &e.Kind, &e.Namespace, &e.Name, &e.UID, &from, &to, &e.Reason, &dt); err != nil {
			return nil, s.mapErr(err)
		}
		e.Time, e.FromPhase, e.ToPhase = fromNanos(ts), catalog.Phase(from), catalog.Phase(to)
		if dt != "" {
			e.Details = json.RawMessage(dt)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.mapErr(err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}
