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

// The peer outbox: claimed with a lease like the notification outbox;
// an answer ends a message and moves its forward edge in one transaction.

const peerMsgColumns = `id, peer, type, idempotency_key, epoch, body, state, next_attempt_at, attempts, last_error, created_at, delivered_at, holder, lease`

func scanPeerMsg(r interface{ Scan(...any) error }) (*catalog.PeerMessage, error) {
	var (
		m                        catalog.PeerMessage
		typ, body, state         string
		next, created, delivered int64
	)
	if err := r.Scan(&m.ID, &m.Peer, &typ, &m.IdempotencyKey, &m.Epoch, &body, &state, &next, &m.Attempts, &m.LastError,
		&created, &delivered, &m.Holder, &m.Lease); err != nil {
		return nil, err
	}
	m.Type, m.Body, m.State = catalog.PeerMessageType(typ), json.RawMessage(body), catalog.NotificationState(state)
	m.NextAttemptAt, m.CreatedAt, m.DeliveredAt = fromNanos(next), fromNanos(created), fromNanos(delivered)
	return &m, nil
}

func queryPeerMsgs(ctx context.Context, q Querier, sql string, args ...any) ([]*catalog.PeerMessage, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*catalog.PeerMessage
	for rows.Next() {
		m, err := scanPeerMsg(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// ClaimPeerMessages implements catalog.Store.
func (s *Store) ClaimPeerMessages(ctx context.Context, holder string, ttl time.Duration, limit int) ([]*catalog.PeerMessage, error) {
	if holder == "" {
		return nil, fmt.Errorf("%w: empty lease holder", catalog.ErrInvalid)
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	now := s.clock()
	var out []*catalog.PeerMessage
	err := s.writeTx(ctx, func(q Querier) error {
		var err error
		out, err = queryPeerMsgs(ctx, q, `WITH picked AS (
    SELECT id FROM peer_messages WHERE available_at IS NOT NULL AND available_at <= $1
    ORDER BY available_at, id LIMIT $2`+s.d.SkipLocked+`
)
UPDATE peer_messages SET holder = $3, lease_expires_at = $4, available_at = $4, lease = lease + 1, attempts = attempts + 1
WHERE id IN (SELECT id FROM picked) RETURNING `+peerMsgColumns,
			now.UnixNano(), max(limit, 1), holder, now.Add(ttl).UnixNano())
		return err
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// claimedPeerMsg loads the claim (id, lease) with a row lock, or
// ErrLeaseLost.
func (s *Store) claimedPeerMsg(ctx context.Context, q Querier, id, lease int64) (*catalog.PeerMessage, error) {
	m, err := scanPeerMsg(q.QueryRow(ctx, `SELECT `+peerMsgColumns+` FROM peer_messages WHERE id = $1 AND lease = $2 AND state = $3 AND holder <> ''`+s.d.ForUpdate,
		id, lease, string(catalog.NotificationPending)))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("peer message %d, lease %d: %w", id, lease, catalog.ErrLeaseLost)
	}
	return m, err
}

// AnswerPeerMessage implements catalog.Store.
func (s *Store) AnswerPeerMessage(ctx context.Context, id, lease int64, a catalog.PeerAnswer) error {
	now := s.clock()
	err := s.writeTx(ctx, func(q Querier) error {
		m, err := s.claimedPeerMsg(ctx, q, id, lease)
		if err != nil {
			return err
		}
		stmts := []Stmt{{SQL: `UPDATE peer_messages SET state = $1, available_at = NULL, delivered_at = $2, last_error = '', holder = '', lease_expires_at = 0
WHERE id = $3`, Args: []any{string(catalog.NotificationDelivered), now.UnixNano(), id}}}
		if m.Type == catalog.PeerMsgRegisterBackReference {
			edge, err := scanPeerRef(q.QueryRow(ctx, `SELECT `+peerRefColumns+` FROM peer_references WHERE idempotency_key = $1`+s.d.ForUpdate, m.IdempotencyKey))
			switch {
			case errors.Is(err, ErrNoRows):
				// the edge went with its referrer: nothing to move
			case err != nil:
				return err
			default:
				state, action, reason := catalog.PeerEdgeAcknowledged, catalog.AuditPeerAcknowledged, ""
				if !a.Accepted {
					state, action, reason = catalog.PeerEdgeRefused, catalog.AuditPeerRefused, a.Reason
				}
				stmts = append(stmts,
					Stmt{SQL: `UPDATE peer_references SET state = $1, reason = $2, updated_at = $3 WHERE idempotency_key = $4`,
						Args: []any{string(state), reason, now.UnixNano(), m.IdempotencyKey}},
					auditStmt(catalog.AuditEntry{Time: now, Actor: catalog.ActorPeerPrefix + m.Peer, Action: action,
						Kind: edge.Referrer.Kind, Namespace: edge.Referrer.Namespace, Name: edge.Referrer.Name, UID: edge.Referrer.UID,
						Reason: "peer " + m.Peer + " on " + edge.Target.String() + ": " + string(state) + prefixed(": ", reason)}))
			}
		}
		return q.ExecBatch(ctx, stmts)
	})
	return s.mapErr(err)
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// RetryPeerMessage implements catalog.Store.
func (s *Store) RetryPeerMessage(ctx context.Context, id, lease int64, next time.Time, lastErr string) error {
	now := s.clock()
	if next.IsZero() {
		next = now
	}
	err := s.writeTx(ctx, func(q Querier) error {
		if _, err := s.claimedPeerMsg(ctx, q, id, lease); err != nil {
			return err
		}
		_, err := q.Exec(ctx, `UPDATE peer_messages SET next_attempt_at = $1, available_at = $1, last_error = $2, holder = '', lease_expires_at = 0
WHERE id = $3`, next.UnixNano(), lastErr, id)
		return err
	})
	return s.mapErr(err)
}

// PeerMessages implements catalog.Store.
func (s *Store) PeerMessages(ctx context.Context, peer string) ([]*catalog.PeerMessage, error) {
	sql := `SELECT ` + peerMsgColumns + ` FROM peer_messages`
	var args []any
	if peer != "" {
		sql += ` WHERE peer = $1`
		args = append(args, peer)
	}
	out, err := queryPeerMsgs(ctx, s.b.Reader(), sql+` ORDER BY id`, args...)
	return out, s.mapErr(err)
}
