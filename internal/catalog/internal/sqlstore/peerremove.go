package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// Removing a forward edge from a living referrer (apply of a manifest
// without the reference), and reading the edges of many referrers at once
// (apply reads those of the resources it plans, a chunk at a time).

// PeerReferencesOf implements catalog.Store.
func (s *Store) PeerReferencesOf(ctx context.Context, referrerUIDs []string) ([]*catalog.PeerReference, error) {
	var out []*catalog.PeerReference
	for uids := referrerUIDs; len(uids) > 0; {
		n := min(len(uids), 500)
		chunk := uids[:n]
		uids = uids[n:]
		ph := make([]string, len(chunk))
		args := make([]any, len(chunk))
		for i, u := range chunk {
			ph[i], args[i] = fmt.Sprintf("$%d", i+1), u
		}
		rows, err := s.b.Reader().Query(ctx, `SELECT `+peerRefColumns+` FROM peer_references WHERE referrer_uid IN (`+strings.Join(ph, ", ")+`)
ORDER BY referrer_uid, peer, target_kind, target_namespace, target_name`, args...)
		if err != nil {
			return nil, s.mapErr(err)
		}
		for rows.Next() {
			p, err := scanPeerRef(rows)
			if err != nil {
				rows.Close()
				return nil, s.mapErr(err)
			}
			out = append(out, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, s.mapErr(err)
		}
	}
	return out, nil
}

// PeerReferrers implements catalog.Store.
func (s *Store) PeerReferrers(ctx context.Context) ([]string, error) {
	rows, err := s.b.Reader().Query(ctx, `SELECT DISTINCT referrer_uid FROM peer_references ORDER BY referrer_uid`)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, s.mapErr(err)
		}
		out = append(out, u)
	}
	return out, s.mapErr(rows.Err())
}

// RemovePeerReference implements catalog.Store.
func (s *Store) RemovePeerReference(ctx context.Context, ref catalog.PeerReference) (bool, error) {
	if ref.Referrer.UID == "" || ref.Peer == "" || ref.Target.Kind == "" || ref.Target.Name == "" {
		return false, fmt.Errorf("%w: removing a peer reference needs its referrer uid, its peer and its target", catalog.ErrInvalid)
	}
	now := s.clock()
	removed := false
	err := s.writeTx(ctx, func(q Querier) error {
		// The referrer's row lock orders the removal with its lifecycle
		// writes (a purge drops its edges) and with AddPeerReference.
		cur, err := s.getOne(ctx, q, "uid "+ref.Referrer.UID, `SELECT doc FROM resources WHERE uid = $1`+s.d.ForUpdate, ref.Referrer.UID)
		if err != nil {
			return err
		}
		e, err := scanPeerRef(q.QueryRow(ctx, `SELECT `+peerRefColumns+` FROM peer_references
WHERE referrer_uid = $1 AND peer = $2 AND target_kind = $3 AND target_namespace = $4 AND target_name = $5`,
			cur.UID, ref.Peer, ref.Target.Kind, ref.Target.Namespace, ref.Target.Name))
		switch {
		case errors.Is(err, ErrNoRows):
			return nil // removed already
		case err != nil:
			return err
		case ref.IdempotencyKey != "" && ref.IdempotencyKey != e.IdempotencyKey:
			return fmt.Errorf("%w: the reference of %s to %s on peer %s was replaced since it was read", catalog.ErrConflict,
				termtext.Quote(cur.Key().String()), termtext.Quote(e.Target.String()), termtext.Quote(e.Peer))
		}
		removed = true
		stmts := []Stmt{{SQL: `DELETE FROM peer_references WHERE idempotency_key = $1`, Args: []any{e.IdempotencyKey}}}
		told := "its peer holds no stub for it (refused)"
		if e.State != catalog.PeerEdgeRefused {
			drop, err := dropEdgeStmts(e, now)
			if err != nil {
				return err
			}
			stmts = append(stmts, drop...)
			told = "peer " + e.Peer + " is told to drop its back-reference, if it holds one"
		}
		details, _ := json.Marshal(map[string]any{"peer": e.Peer, "target": e.Target, "onTargetDelete": e.OnTargetDelete,
			"idempotencyKey": e.IdempotencyKey, "state": e.State})
		stmts = append(stmts, auditStmt(catalog.AuditEntry{Time: now, Actor: catalog.ActorFrom(ctx), Action: catalog.AuditPeerReferenceRemoved,
			Kind: cur.Kind, Namespace: cur.Namespace, Name: cur.Name, UID: cur.UID, FromPhase: cur.Phase, ToPhase: cur.Phase,
			Reason: "no longer references " + e.Target.String() + " on peer " + e.Peer + ": " + told, Details: details}))
		return q.ExecBatch(ctx, stmts)
	})
	if err != nil {
		return false, s.mapErr(err)
	}
	return removed, nil
}

// dropEdgeStmts tell e's peer that the edge e (not Refused) is gone. Its
// registration, if still pending and not in flight (no live claim), is
// cancelled: it is never sent again. A DropBackReference is queued
// unless the registration was never sent (it can have made no stub); a
// registration in flight is not cancelled, and the drop waits for its
// answer (ClaimPeerMessages), so that it never overtakes it.
func dropEdgeStmts(e *catalog.PeerReference, now time.Time) ([]Stmt, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return []Stmt{
		{SQL: `UPDATE peer_messages SET state = $1, available_at = NULL, holder = '', lease_expires_at = 0, last_error = $2
WHERE peer = $3 AND type = $4 AND idempotency_key = $5 AND state = $6 AND lease_expires_at <= $7`,
			Args: []any{string(catalog.NotificationFailed), "cancelled: its reference is gone (removed, or its referrer purged) before the peer answered",
				e.Peer, string(catalog.PeerMsgRegisterBackReference), e.IdempotencyKey, string(catalog.NotificationPending), now.UnixNano()}},
		{SQL: `INSERT INTO peer_messages (peer, type, idempotency_key, epoch, body, state, next_attempt_at, available_at, created_at)
SELECT CAST($1 AS TEXT), CAST($2 AS TEXT), CAST($3 AS TEXT), 0, CAST($4 AS TEXT), CAST($5 AS TEXT),
  CAST($6 AS BIGINT), CAST($6 AS BIGINT), CAST($6 AS BIGINT) WHERE EXISTS (
  SELECT 1 FROM peer_messages WHERE peer = $1 AND type = $7 AND idempotency_key = $3 AND (state <> $8 OR attempts > 0))
ON CONFLICT (peer, type, idempotency_key, epoch) DO NOTHING`,
			Args: []any{e.Peer, string(catalog.PeerMsgDropBackReference), e.IdempotencyKey, string(body),
				string(catalog.NotificationPending), now.UnixNano(), string(catalog.PeerMsgRegisterBackReference), string(catalog.NotificationFailed)}},
	}, nil
}
