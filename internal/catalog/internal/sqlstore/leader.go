package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

const leaderColumns = `name, holder, term, acquired_at, renewed_at, expires_at`

func scanLeader(r interface{ Scan(...any) error }) (*catalog.LeaderLease, error) {
	var (
		l                    catalog.LeaderLease
		acquired, renewed, e int64
	)
	if err := r.Scan(&l.Name, &l.Holder, &l.Term, &acquired, &renewed, &e); err != nil {
		return nil, err
	}
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt = fromNanos(acquired), fromNanos(renewed), fromNanos(e)
	return &l, nil
}

func validLeader(name, holder string) error {
	if name == "" || holder == "" {
		return fmt.Errorf("%w: a leader lease needs a name and a holder", catalog.ErrInvalid)
	}
	return nil
}

// AcquireLeader implements catalog.Store. The row is created free on first
// use, then locked (FOR UPDATE on PostgreSQL; SQLite's write transaction
// is exclusive), so two replicas never both begin a term.
func (s *Store) AcquireLeader(ctx context.Context, name, holder string, ttl time.Duration) (*catalog.LeaderLease, error) {
	if err := validLeader(name, holder); err != nil {
		return nil, err
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	now := s.clock()
	actor := catalog.ActorFrom(ctx)
	var out *catalog.LeaderLease
	err := s.b.WriteTx(ctx, func(q Querier) error {
		if _, err := q.Exec(ctx, `INSERT INTO leader_leases (name, holder, term, acquired_at, renewed_at, expires_at)
VALUES ($1, '', 0, 0, 0, 0) ON CONFLICT (name) DO NOTHING`, name); err != nil {
			return err
		}
		cur, err := scanLeader(q.QueryRow(ctx, `SELECT `+leaderColumns+` FROM leader_leases WHERE name = $1`+s.d.ForUpdate, name))
		if err != nil {
			return err
		}
		exp := now.Add(ttl).UnixNano()
		switch {
		case cur.HeldBy(holder, now):
			out, err = scanLeader(q.QueryRow(ctx, `UPDATE leader_leases SET renewed_at = $2, expires_at = $3 WHERE name = $1 RETURNING `+leaderColumns,
				name, now.UnixNano(), exp))
			return err
		case cur.Holder != "" && cur.ExpiresAt.After(now):
			out = cur // someone else leads
			return nil
		}
		out, err = scanLeader(q.QueryRow(ctx, `UPDATE leader_leases SET holder = $2, term = term + 1, acquired_at = $3, renewed_at = $3, expires_at = $4
WHERE name = $1 RETURNING `+leaderColumns, name, holder, now.UnixNano(), exp))
		if err != nil {
			return err
		}
		out.TookOver = cur.Holder != ""
		details, err := json.Marshal(map[string]any{
			"holder": holder, "term": out.Term, "expiresAt": out.ExpiresAt,
			"previousHolder": cur.Holder, "previousTerm": cur.Term, "previousExpiresAt": cur.ExpiresAt,
			"tookOver": out.TookOver,
		})
		if err != nil {
			return err
		}
		reason := "the lease was free"
		if out.TookOver {
			reason = "the previous holder's lease expired"
		}
		st := auditStmt(catalog.AuditEntry{Time: now, Actor: actor, Action: catalog.AuditLeaderElected,
			Kind: catalog.AuditKindLeader, Name: name, Reason: reason, Details: details})
		_, err = q.Exec(ctx, st.SQL, st.Args...)
		return err
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return out, nil
}

// ResignLeader implements catalog.Store.
func (s *Store) ResignLeader(ctx context.Context, name, holder string) error {
	if err := validLeader(name, holder); err != nil {
		return err
	}
	now := s.clock()
	actor := catalog.ActorFrom(ctx)
	topic := catalog.WakeTopicLeaderPrefix + name
	err := s.b.WriteTx(ctx, func(q Querier) error {
		cur, err := scanLeader(q.QueryRow(ctx, `SELECT `+leaderColumns+` FROM leader_leases WHERE name = $1`+s.d.ForUpdate, name))
		if errors.Is(err, ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if !cur.HeldBy(holder, now) {
			return nil
		}
		if _, err := q.Exec(ctx, `UPDATE leader_leases SET holder = '', expires_at = 0 WHERE name = $1`, name); err != nil {
			return err
		}
		details, err := json.Marshal(map[string]any{"holder": holder, "term": cur.Term, "expiresAt": cur.ExpiresAt})
		if err != nil {
			return err
		}
		st := auditStmt(catalog.AuditEntry{Time: now, Actor: actor, Action: catalog.AuditLeaderResigned,
			Kind: catalog.AuditKindLeader, Name: name, Reason: "graceful stop", Details: details})
		if _, err := q.Exec(ctx, st.SQL, st.Args...); err != nil {
			return err
		}
		return s.b.NotifyWake(ctx, q, topic)
	})
	if err != nil {
		return s.mapErr(err)
	}
	s.wakeLocal(topic)
	return nil
}

// GetLeader implements catalog.Store.
func (s *Store) GetLeader(ctx context.Context, name string) (*catalog.LeaderLease, error) {
	l, err := scanLeader(s.b.Reader().QueryRow(ctx, `SELECT `+leaderColumns+` FROM leader_leases WHERE name = $1`, name))
	if errors.Is(err, ErrNoRows) || (err == nil && l.Term == 0) {
		return nil, fmt.Errorf("leader lease %s: %w", name, catalog.ErrNotFound)
	}
	return l, s.mapErr(err)
}

// writeTx runs fn in a write transaction that is fenced by the leader
// term of ctx, if any (catalog.WithLeaderFence): every write of the Store
// but the leader lease's own goes through it.
func (s *Store) writeTx(ctx context.Context, fn func(Querier) error) error {
	f := catalog.LeaderFenceFrom(ctx)
	err := s.b.WriteTx(ctx, func(q Querier) error {
		if err := s.checkLeaderFence(ctx, q, f, s.clock()); err != nil {
			return err
		}
		return fn(q)
	})
	if err == nil {
		s.wrote.Store(time.Now().UnixNano())
	}
	return err
}

// checkLeaderFence fails with a *catalog.StaleTermError unless f's holder
// still holds the lease f names, in f's term, live at now. It runs first
// in the write transaction it guards and locks the lease row (FOR SHARE on
// PostgreSQL; SQLite's write transaction is exclusive), so no takeover
// (AcquireLeader's FOR UPDATE) can commit before that transaction ends; a
// nil f is no fence.
func (s *Store) checkLeaderFence(ctx context.Context, q Querier, f *catalog.LeaderFence, now time.Time) error {
	if f == nil {
		return nil
	}
	if err := validLeader(f.Name, f.Holder); err != nil || f.Term < 1 {
		return fmt.Errorf("%w: a leader fence needs the lease's name, its holder and a term", catalog.ErrInvalid)
	}
	cur, err := scanLeader(q.QueryRow(ctx, `SELECT `+leaderColumns+` FROM leader_leases WHERE name = $1`+s.d.ForShare, f.Name))
	if errors.Is(err, ErrNoRows) {
		return &catalog.StaleTermError{Fence: *f}
	}
	if err != nil {
		return err
	}
	if cur.Term != f.Term || !cur.HeldBy(f.Holder, now) {
		return &catalog.StaleTermError{Fence: *f, Current: cur}
	}
	return nil
}
