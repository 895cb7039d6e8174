package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

// The retry queue and the outbox. Both keep available_at: the next
// attempt while waiting, the lease expiry while claimed, NULL once
// finished, so that claims and the next-due timer read only the available
// prefix of a partial index.

const retryColumns = `id, kind, key, item_id, plugin, owner_uid, state, next_attempt_at, holder, lease_expires_at, epoch, attempts, last_error, history, first_seen_at, updated_at`

func scanRetry(r interface{ Scan(...any) error }) (*catalog.RetryRow, error) {
	var (
		row                             catalog.RetryRow
		state, history                  string
		next, lease, firstSeen, updated int64
	)
	if err := r.Scan(&row.ID, &row.Kind, &row.Key, &row.ItemID, &row.Plugin, &row.OwnerUID, &state, &next, &row.Holder, &lease,
		&row.Epoch, &row.Attempts, &row.LastError, &history, &firstSeen, &updated); err != nil {
		return nil, err
	}
	row.State = catalog.RetryState(state)
	row.NextAttemptAt, row.LeaseExpiresAt = fromNanos(next), fromNanos(lease)
	row.FirstSeenAt, row.UpdatedAt = fromNanos(firstSeen), fromNanos(updated)
	if history != "" {
		if err := json.Unmarshal([]byte(history), &row.History); err != nil {
			return nil, fmt.Errorf("catalog: corrupt retry history of row %d: %w", row.ID, err)
		}
	}
	return &row, nil
}

func (s *Store) queryRetries(ctx context.Context, q Querier, sql string, args ...any) ([]*catalog.RetryRow, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*catalog.RetryRow
	for rows.Next() {
		r, err := scanRetry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func validRetryState(st catalog.RetryState) error {
	switch st {
	case catalog.RetryRetryable, catalog.RetryRunning, catalog.RetryDiscarded:
		return nil
	}
	return fmt.Errorf("%w: retry state %q (want retryable, running or discarded)", catalog.ErrInvalid, st)
}

// writeRetry inserts (ID 0) or rewrites row, then writes plan's audit
// entries and notifications, in the transaction q.
func (s *Store) writeRetry(ctx context.Context, q Querier, row *catalog.RetryRow, plan catalog.RetryPlan, now time.Time) error {
	if err := validRetryState(plan.State); err != nil {
		return err
	}
	if plan.ResetAttempts {
		row.Attempts = 0
	}
	if plan.Note != nil {
		row.History = appendHistory(row.History, *plan.Note)
	}
	row.State, row.UpdatedAt = plan.State, now
	row.NextAttemptAt = plan.NextAttemptAt
	var avail any
	switch row.State {
	case catalog.RetryRetryable:
		if row.NextAttemptAt.IsZero() {
			row.NextAttemptAt = now
		}
		avail = row.NextAttemptAt.UnixNano()
		row.Holder, row.LeaseExpiresAt = "", time.Time{}
	case catalog.RetryRunning:
		if row.Holder == "" || row.LeaseExpiresAt.IsZero() {
			return fmt.Errorf("%w: a running retry row needs a lease (use ClaimRetries)", catalog.ErrInvalid)
		}
		avail = row.LeaseExpiresAt.UnixNano()
	case catalog.RetryDiscarded:
		row.Holder, row.LeaseExpiresAt = "", time.Time{}
	}
	hist, err := encode(row.History)
	if err != nil {
		return err
	}
	if row.ID == 0 {
		err = q.QueryRow(ctx, `INSERT INTO retries (kind, key, item_id, plugin, owner_uid, state, next_attempt_at, available_at, holder,
  lease_expires_at, epoch, attempts, last_error, history, first_seen_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) RETURNING id`,
			row.Kind, row.Key, row.ItemID, row.Plugin, row.OwnerUID, string(row.State), nanos(row.NextAttemptAt), avail, row.Holder,
			nanos(row.LeaseExpiresAt), row.Epoch, row.Attempts, row.LastError, hist, nanos(row.FirstSeenAt), nanos(now)).Scan(&row.ID)
	} else {
		_, err = q.Exec(ctx, `UPDATE retries SET owner_uid = $2, state = $3, next_attempt_at = $4, available_at = $5, holder = $6,
  lease_expires_at = $7, epoch = $8, attempts = $9, last_error = $10, history = $11, updated_at = $12 WHERE id = $1`,
			row.ID, row.OwnerUID, string(row.State), nanos(row.NextAttemptAt), avail, row.Holder, nanos(row.LeaseExpiresAt),
			row.Epoch, row.Attempts, row.LastError, hist, nanos(now))
	}
	if err != nil {
		return err
	}
	stmts := make([]Stmt, 0, len(plan.Audit)+len(plan.Notifications))
	for _, e := range plan.Audit {
		if e.Action == "" {
			return fmt.Errorf("%w: audit entry without an action", catalog.ErrInvalid)
		}
		if len(e.Details) > 0 && !json.Valid(e.Details) {
			return fmt.Errorf("%w: audit details are not valid JSON", catalog.ErrInvalid)
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		if e.Actor == "" {
			e.Actor = catalog.ActorFrom(ctx)
		}
		stmts = append(stmts, auditStmt(e))
	}
	for _, n := range plan.Notifications {
		st, err := notificationStmt(n, now)
		if err != nil {
			return err
		}
		stmts = append(stmts, st)
	}
	if len(stmts) == 0 {
		return nil
	}
	return q.ExecBatch(ctx, stmts)
}

func appendHistory(h []catalog.RetryAttempt, a catalog.RetryAttempt) []catalog.RetryAttempt {
	h = append(h, a)
	if len(h) > catalog.RetryHistoryMax {
		h = append(h[:0:0], h[len(h)-catalog.RetryHistoryMax:]...)
	}
	return h
}

func notificationStmt(n catalog.Notification, now time.Time) (Stmt, error) {
	if n.EventID == "" || n.EventType == "" || n.Target == "" {
		return Stmt{}, fmt.Errorf("%w: a notification needs an event id, an event type and a target", catalog.ErrInvalid)
	}
	if !json.Valid(n.Body) {
		return Stmt{}, fmt.Errorf("%w: notification body is not valid JSON", catalog.ErrInvalid)
	}
	next := n.NextAttemptAt
	if next.IsZero() {
		next = now
	}
	return Stmt{SQL: `INSERT INTO notifications (event_id, event_type, target, body, state, next_attempt_at, available_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $6, $7) ON CONFLICT (event_id, target) DO NOTHING`,
		Args: []any{n.EventID, n.EventType, n.Target, string(n.Body), string(catalog.NotificationPending), next.UnixNano(), now.UnixNano()}}, nil
}

func validIdentity(id catalog.RetryIdentity) error {
	if id.Kind == "" || id.Key == "" {
		return fmt.Errorf("%w: a retry row needs a kind and a key", catalog.ErrInvalid)
	}
	return nil
}

// RecordRetries implements catalog.Store.
func (s *Store) RecordRetries(ctx context.Context, recs []catalog.RetryRecord, decide func(*catalog.RetryRow) catalog.RetryPlan) ([]*catalog.RetryRow, error) {
	if decide == nil {
		return nil, fmt.Errorf("%w: RecordRetries needs a decide function", catalog.ErrInvalid)
	}
	for _, r := range recs {
		if err := validIdentity(r.RetryIdentity); err != nil {
			return nil, err
		}
	}
	now := s.clock()
	var out []*catalog.RetryRow
	err := s.writeTx(ctx, func(q Querier) error {
		out = out[:0]
		for _, rec := range recs {
			row, err := scanRetry(q.QueryRow(ctx, `SELECT `+retryColumns+` FROM retries WHERE kind = $1 AND key = $2 AND item_id = $3 AND plugin = $4`+s.d.ForUpdate,
				rec.Kind, rec.Key, rec.ItemID, rec.Plugin))
			switch {
			case errors.Is(err, ErrNoRows):
				row = &catalog.RetryRow{RetryIdentity: rec.RetryIdentity, State: catalog.RetryRetryable, FirstSeenAt: now}
			case err != nil:
				return err
			}
			if rec.OwnerUID != "" {
				row.OwnerUID = rec.OwnerUID
			}
			a := rec.Attempt
			if a.Time.IsZero() {
				a.Time = now
			}
			row.Attempts++
			row.Epoch++
			row.LastError = a.Message
			row.History = appendHistory(row.History, a)
			row.Holder, row.LeaseExpiresAt = "", time.Time{}
			if err := s.writeRetry(ctx, q, row, decide(row), now); err != nil {
				return err
			}
			out = append(out, row)
		}
		return nil
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return out, nil
}

// UpdateRetry implements catalog.Store.
func (s *Store) UpdateRetry(ctx context.Context, id, epoch int64, fn func(*catalog.RetryRow) (catalog.RetryPlan, error)) (*catalog.RetryRow, error) {
	now := s.clock()
	var out *catalog.RetryRow
	err := s.writeTx(ctx, func(q Querier) error {
		row, err := scanRetry(q.QueryRow(ctx, `SELECT `+retryColumns+` FROM retries WHERE id = $1`+s.d.ForUpdate, id))
		if errors.Is(err, ErrNoRows) {
			return fmt.Errorf("retry row %d: %w", id, catalog.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if epoch > 0 && row.Epoch != epoch {
			return fmt.Errorf("retry row %d, epoch %d (now %d): %w", id, epoch, row.Epoch, catalog.ErrLeaseLost)
		}
		plan, err := fn(row)
		if err != nil {
			return err
		}
		if plan.State != catalog.RetryRunning {
			row.Epoch++
		}
		if err := s.writeRetry(ctx, q, row, plan, now); err != nil {
			return err
		}
		out = row
		return nil
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return out, nil
}

// DeleteRetries implements catalog.Store.
func (s *Store) DeleteRetries(ctx context.Context, key string, ids []catalog.RetryIdentity) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(q Querier) error {
		if ids == nil {
			var err error
			n, err = q.Exec(ctx, `DELETE FROM retries WHERE key = $1`, key)
			return err
		}
		for _, id := range ids {
			m, err := q.Exec(ctx, `DELETE FROM retries WHERE kind = $1 AND key = $2 AND item_id = $3 AND plugin = $4`, id.Kind, key, id.ItemID, id.Plugin)
			if err != nil {
				return err
			}
			n += m
		}
		return nil
	})
	return int(n), s.mapErr(err)
}

// ClaimRetries implements catalog.Store.
func (s *Store) ClaimRetries(ctx context.Context, holder string, ttl time.Duration, limit int) ([]*catalog.RetryRow, error) {
	if holder == "" {
		return nil, fmt.Errorf("%w: empty lease holder", catalog.ErrInvalid)
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	limit = max(limit, 1)
	now := s.clock()
	var out []*catalog.RetryRow
	err := s.writeTx(ctx, func(q Querier) error {
		var err error
		out, err = s.queryRetries(ctx, q, `WITH picked AS (
    SELECT id FROM retries WHERE available_at IS NOT NULL AND available_at <= $1
    ORDER BY available_at, id LIMIT $2`+s.d.SkipLocked+`
)
UPDATE retries SET state = $3, holder = $4, lease_expires_at = $5, available_at = $5, epoch = epoch + 1, updated_at = $1
WHERE id IN (SELECT id FROM picked) RETURNING `+retryColumns,
			now.UnixNano(), limit, string(catalog.RetryRunning), holder, now.Add(ttl).UnixNano())
		return err
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	sortRetries(out)
	return out, nil
}

func sortRetries(rs []*catalog.RetryRow) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && (rs[j].NextAttemptAt.Before(rs[j-1].NextAttemptAt) ||
			rs[j].NextAttemptAt.Equal(rs[j-1].NextAttemptAt) && rs[j].ID < rs[j-1].ID); j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// NextRetryDue implements catalog.Store.
func (s *Store) NextRetryDue(ctx context.Context) (time.Time, bool, error) {
	return s.minAvailable(ctx, "retries")
}

func (s *Store) minAvailable(ctx context.Context, table string) (time.Time, bool, error) {
	var n *int64
	err := s.b.Reader().QueryRow(ctx, `SELECT MIN(available_at) FROM `+table+` WHERE available_at IS NOT NULL`).Scan(&n)
	if err != nil {
		return time.Time{}, false, s.mapErr(err)
	}
	if n == nil {
		return time.Time{}, false, nil
	}
	return fromNanos(*n), true, nil
}

// GetRetry implements catalog.Store.
func (s *Store) GetRetry(ctx context.Context, id int64) (*catalog.RetryRow, error) {
	r, err := scanRetry(s.b.Reader().QueryRow(ctx, `SELECT `+retryColumns+` FROM retries WHERE id = $1`, id))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("retry row %d: %w", id, catalog.ErrNotFound)
	}
	return r, s.mapErr(err)
}

// ListRetries implements catalog.Store.
func (s *Store) ListRetries(ctx context.Context, f catalog.RetryFilter) ([]*catalog.RetryRow, error) {
	sql := `SELECT ` + retryColumns + ` FROM retries WHERE 1 = 1`
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		sql += fmt.Sprintf(" AND "+cond, len(args))
	}
	if f.State != "" {
		if err := validRetryState(f.State); err != nil {
			return nil, err
		}
		add("state = $%d", string(f.State))
	}
	if f.Kind != "" {
		add("kind = $%d", f.Kind)
	}
	if f.Key != "" {
		add("key = $%d", f.Key)
	}
	if f.OwnerUID != "" {
		add("owner_uid = $%d", f.OwnerUID)
	}
	sql += " ORDER BY next_attempt_at, id"
	if f.Limit > 0 {
		args = append(args, f.Limit)
		sql += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	out, err := s.queryRetries(ctx, s.b.Reader(), sql, args...)
	return out, s.mapErr(err)
}

// CountRetries implements catalog.Store.
func (s *Store) CountRetries(ctx context.Context) (map[catalog.RetryState]int64, error) {
	rows, err := s.b.Reader().Query(ctx, `SELECT state, COUNT(*) FROM retries GROUP BY state`)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	out := map[catalog.RetryState]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, s.mapErr(err)
		}
		out[catalog.RetryState(st)] = n
	}
	return out, s.mapErr(rows.Err())
}

// --- outbox ---

const notificationColumns = `id, event_id, event_type, target, body, state, next_attempt_at, attempts, last_error, created_at, delivered_at, holder, lease_expires_at, epoch`

func scanNotification(r interface{ Scan(...any) error }) (*catalog.Notification, error) {
	var (
		n                                 catalog.Notification
		body, state                       string
		next, created, delivered, leaseAt int64
	)
	if err := r.Scan(&n.ID, &n.EventID, &n.EventType, &n.Target, &body, &state, &next, &n.Attempts, &n.LastError, &created, &delivered,
		&n.Holder, &leaseAt, &n.Epoch); err != nil {
		return nil, err
	}
	n.Body, n.State = json.RawMessage(body), catalog.NotificationState(state)
	n.NextAttemptAt, n.CreatedAt, n.DeliveredAt, n.LeaseExpiresAt = fromNanos(next), fromNanos(created), fromNanos(delivered), fromNanos(leaseAt)
	return &n, nil
}

func (s *Store) queryNotifications(ctx context.Context, q Querier, sql string, args ...any) ([]*catalog.Notification, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*catalog.Notification
	for rows.Next() {
		n, err := scanNotification(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// ClaimNotifications implements catalog.Store.
func (s *Store) ClaimNotifications(ctx context.Context, holder string, ttl time.Duration, limit int) ([]*catalog.Notification, error) {
	if holder == "" {
		return nil, fmt.Errorf("%w: empty lease holder", catalog.ErrInvalid)
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	limit = max(limit, 1)
	now := s.clock()
	var out []*catalog.Notification
	err := s.writeTx(ctx, func(q Querier) error {
		var err error
		out, err = s.queryNotifications(ctx, q, `WITH picked AS (
    SELECT id FROM notifications WHERE available_at IS NOT NULL AND available_at <= $1
    ORDER BY available_at, id LIMIT $2`+s.d.SkipLocked+`
)
UPDATE notifications SET holder = $3, lease_expires_at = $4, available_at = $4, epoch = epoch + 1, attempts = attempts + 1
WHERE id IN (SELECT id FROM picked) RETURNING `+notificationColumns,
			now.UnixNano(), limit, holder, now.Add(ttl).UnixNano())
		return err
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].ID < out[j-1].ID; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// FinishNotification implements catalog.Store.
func (s *Store) FinishNotification(ctx context.Context, id, epoch int64, state catalog.NotificationState, next time.Time, lastErr string) error {
	now := s.clock()
	var avail any
	var delivered int64
	switch state {
	case catalog.NotificationPending:
		if next.IsZero() {
			next = now
		}
		avail = next.UnixNano()
	case catalog.NotificationDelivered:
		delivered = now.UnixNano()
	case catalog.NotificationFailed:
	default:
		return fmt.Errorf("%w: notification state %q", catalog.ErrInvalid, state)
	}
	err := s.writeTx(ctx, func(q Querier) error {
		n, err := q.Exec(ctx, `UPDATE notifications SET state = $1, next_attempt_at = $2, available_at = $3, last_error = $4, delivered_at = $5,
  holder = '', lease_expires_at = 0 WHERE id = $6 AND epoch = $7 AND state = $8 AND holder <> ''`,
			string(state), nanos(next), avail, lastErr, delivered, id, epoch, string(catalog.NotificationPending))
		if err == nil && n == 0 {
			err = fmt.Errorf("notification %d, epoch %d: %w", id, epoch, catalog.ErrLeaseLost)
		}
		return err
	})
	return s.mapErr(err)
}

// NextNotificationDue implements catalog.Store.
func (s *Store) NextNotificationDue(ctx context.Context) (time.Time, bool, error) {
	return s.minAvailable(ctx, "notifications")
}

// ListNotifications implements catalog.Store.
func (s *Store) ListNotifications(ctx context.Context, state catalog.NotificationState, limit int) ([]*catalog.Notification, error) {
	if limit <= 0 {
		limit = listLimitDefault
	}
	sql := `SELECT ` + notificationColumns + ` FROM notifications`
	args := []any{}
	if state != "" {
		args = append(args, string(state))
		sql += ` WHERE state = $1`
	}
	args = append(args, limit)
	sql += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	out, err := s.queryNotifications(ctx, s.b.Reader(), sql, args...)
	return out, s.mapErr(err)
}
