package sqlstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// Federation: forward edges, back-reference stubs and the peer outbox
// (catalog.Federation). Every write takes the row lock of the resource it
// is about, so it is serialized with that resource's lifecycle writes
// (mutate locks the same row).

const peerRefColumns = `referrer_uid, referrer_kind, referrer_namespace, referrer_name, peer, target_kind, target_namespace, target_name,
  on_target_delete, idempotency_key, state, reason, created_at, updated_at`

func scanPeerRef(r interface{ Scan(...any) error }) (*catalog.PeerReference, error) {
	var (
		p                catalog.PeerReference
		on, state        string
		created, updated int64
	)
	if err := r.Scan(&p.Referrer.UID, &p.Referrer.Kind, &p.Referrer.Namespace, &p.Referrer.Name, &p.Peer,
		&p.Target.Kind, &p.Target.Namespace, &p.Target.Name, &on, &p.IdempotencyKey, &state, &p.Reason, &created, &updated); err != nil {
		return nil, err
	}
	p.OnTargetDelete, p.State = catalog.OnTargetDelete(on), catalog.PeerEdgeState(state)
	p.CreatedAt, p.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &p, nil
}

func validOnTargetDelete(on catalog.OnTargetDelete) error {
	switch on {
	case catalog.RefBlock, catalog.RefUnset, catalog.RefCascade, catalog.RefAllowDangling:
		return nil
	}
	return fmt.Errorf("%w: onTargetDelete %q (want block, unset, cascade or allowDangling)", catalog.ErrInvalid, on)
}

func newIdempotencyKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// AddPeerReference implements catalog.Store.
func (s *Store) AddPeerReference(ctx context.Context, ref catalog.PeerReference) (*catalog.PeerReference, error) {
	if ref.Peer == "" || ref.Target.Kind == "" || ref.Target.Name == "" {
		return nil, fmt.Errorf("%w: a peer reference needs a peer and a target kind and name", catalog.ErrInvalid)
	}
	if err := validOnTargetDelete(ref.OnTargetDelete); err != nil {
		return nil, err
	}
	key, err := newIdempotencyKey()
	if err != nil {
		return nil, err
	}
	now := s.clock()
	rk := catalog.Key{Kind: ref.Referrer.Kind, Namespace: ref.Referrer.Namespace, Name: ref.Referrer.Name}
	var out *catalog.PeerReference
	err = s.writeTx(ctx, func(q Querier) error {
		cur, err := s.getOne(ctx, q, rk.String(), resourceByKey+s.d.ForUpdate, rk.Kind, rk.Namespace, rk.Name)
		if err != nil {
			return err
		}
		if cur.Phase == catalog.PhaseDeleting {
			return transitionErr(cur, cur.Phase, "a Deleting resource cannot add a reference to a peer")
		}
		old, err := scanPeerRef(q.QueryRow(ctx, `SELECT `+peerRefColumns+` FROM peer_references
WHERE referrer_uid = $1 AND peer = $2 AND target_kind = $3 AND target_namespace = $4 AND target_name = $5`,
			cur.UID, ref.Peer, ref.Target.Kind, ref.Target.Namespace, ref.Target.Name))
		switch {
		case err == nil && old.OnTargetDelete == ref.OnTargetDelete:
			out = old
			return nil
		case err == nil:
			return fmt.Errorf("%w: %s already references %s on peer %s with onTargetDelete %s", catalog.ErrConflict,
				termtext.Quote(rk.String()), termtext.Quote(ref.Target.String()), termtext.Quote(ref.Peer), old.OnTargetDelete)
		case !errors.Is(err, ErrNoRows):
			return err
		}
		p := ref
		p.Referrer = catalog.ObjectRef{Kind: cur.Kind, Namespace: cur.Namespace, Name: cur.Name, UID: cur.UID}
		p.IdempotencyKey, p.State, p.Reason, p.CreatedAt, p.UpdatedAt = key, catalog.PeerEdgePending, "", now, now
		body, err := json.Marshal(p)
		if err != nil {
			return err
		}
		details, _ := json.Marshal(map[string]any{"peer": p.Peer, "target": p.Target, "onTargetDelete": p.OnTargetDelete, "idempotencyKey": key})
		err = q.ExecBatch(ctx, []Stmt{
			{SQL: `INSERT INTO peer_references (` + peerRefColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
				Args: []any{cur.UID, cur.Kind, cur.Namespace, cur.Name, p.Peer, p.Target.Kind, p.Target.Namespace, p.Target.Name,
					string(p.OnTargetDelete), key, string(p.State), "", now.UnixNano(), now.UnixNano()}},
			{SQL: `INSERT INTO peer_messages (peer, type, idempotency_key, epoch, body, state, next_attempt_at, available_at, created_at)
VALUES ($1, $2, $3, 0, $4, $5, $6, $6, $6)`,
				Args: []any{p.Peer, string(catalog.PeerMsgRegisterBackReference), key, string(body), string(catalog.NotificationPending), now.UnixNano()}},
			auditStmt(catalog.AuditEntry{Time: now, Actor: catalog.ActorFrom(ctx), Action: catalog.AuditPeerReference,
				Kind: cur.Kind, Namespace: cur.Namespace, Name: cur.Name, UID: cur.UID, FromPhase: cur.Phase, ToPhase: cur.Phase,
				Reason: "references " + p.Target.String() + " on peer " + p.Peer, Details: details}),
		})
		out = &p
		return err
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return out, nil
}

// PeerReferences implements catalog.Store.
func (s *Store) PeerReferences(ctx context.Context, referrerUID string) ([]*catalog.PeerReference, error) {
	sql := `SELECT ` + peerRefColumns + ` FROM peer_references`
	var args []any
	if referrerUID != "" {
		sql += ` WHERE referrer_uid = $1`
		args = append(args, referrerUID)
	}
	rows, err := s.b.Reader().Query(ctx, sql+` ORDER BY referrer_uid, peer, target_kind, target_namespace, target_name`, args...)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	var out []*catalog.PeerReference
	for rows.Next() {
		p, err := scanPeerRef(rows)
		if err != nil {
			return nil, s.mapErr(err)
		}
		out = append(out, p)
	}
	return out, s.mapErr(rows.Err())
}

// --- back-reference stubs ---

const backRefColumns = `target_kind, target_namespace, target_name, peer, referrer_uid, referrer_kind, referrer_namespace, referrer_name,
  on_target_delete, idempotency_key, created_at`

func scanBackRef(r interface{ Scan(...any) error }) (*catalog.BackReference, error) {
	var (
		b       catalog.BackReference
		on      string
		created int64
	)
	if err := r.Scan(&b.Target.Kind, &b.Target.Namespace, &b.Target.Name, &b.Peer, &b.Referrer.UID, &b.Referrer.Kind,
		&b.Referrer.Namespace, &b.Referrer.Name, &on, &b.IdempotencyKey, &created); err != nil {
		return nil, err
	}
	b.OnTargetDelete, b.CreatedAt = catalog.OnTargetDelete(on), fromNanos(created)
	return &b, nil
}

// RegisterBackReference implements catalog.Store.
func (s *Store) RegisterBackReference(ctx context.Context, b catalog.BackReference) (*catalog.BackReference, error) {
	if b.Peer == "" || b.IdempotencyKey == "" || b.Referrer.UID == "" || b.Target.Kind == "" || b.Target.Name == "" {
		return nil, fmt.Errorf("%w: a back-reference needs a peer, an idempotency key, a referrer uid and a target", catalog.ErrInvalid)
	}
	if err := validOnTargetDelete(b.OnTargetDelete); err != nil {
		return nil, err
	}
	now := s.clock()
	var out *catalog.BackReference
	err := s.writeTx(ctx, func(q Querier) error {
		old, err := scanBackRef(q.QueryRow(ctx, `SELECT `+backRefColumns+` FROM peer_back_references WHERE peer = $1 AND idempotency_key = $2`,
			b.Peer, b.IdempotencyKey))
		switch {
		case err == nil && (old.Referrer != b.Referrer || old.Target != b.Target || old.OnTargetDelete != b.OnTargetDelete):
			// The key names another stub: no replay, and answering it
			// accepted would make the caller believe in a stub that
			// does not exist.
			return fmt.Errorf("%w: idempotency key %s of peer %s names the back-reference from %s to %s (%s), not from %s to %s (%s)",
				catalog.ErrInvalid, termtext.Quote(b.IdempotencyKey), termtext.Quote(b.Peer),
				termtext.Quote(old.Referrer.String()), termtext.Quote(old.Target.String()), old.OnTargetDelete,
				termtext.Quote(b.Referrer.String()), termtext.Quote(b.Target.String()), b.OnTargetDelete)
		case err == nil:
			out = old // a replay: the stub exists
			return nil
		case !errors.Is(err, ErrNoRows):
			return err
		}
		cur, err := s.getOne(ctx, q, b.Target.String(), resourceByKey+s.d.ForUpdate, b.Target.Kind, b.Target.Namespace, b.Target.Name)
		if err != nil {
			return err
		}
		if cur.Phase != catalog.PhaseActive && cur.Phase != catalog.PhaseScheduled {
			return transitionErr(cur, cur.Phase, "a "+string(cur.Phase)+" resource takes no new back-reference")
		}
		n := b
		n.Target, n.CreatedAt = cur.Key(), now
		details, _ := json.Marshal(map[string]any{"peer": n.Peer, "referrer": n.Referrer, "onTargetDelete": n.OnTargetDelete, "idempotencyKey": n.IdempotencyKey})
		err = q.ExecBatch(ctx, []Stmt{
			{SQL: `INSERT INTO peer_back_references (` + backRefColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (target_kind, target_namespace, target_name, peer, referrer_uid)
DO UPDATE SET on_target_delete = excluded.on_target_delete, idempotency_key = excluded.idempotency_key`,
				Args: []any{n.Target.Kind, n.Target.Namespace, n.Target.Name, n.Peer, n.Referrer.UID, n.Referrer.Kind, n.Referrer.Namespace,
					n.Referrer.Name, string(n.OnTargetDelete), n.IdempotencyKey, now.UnixNano()}},
			auditStmt(catalog.AuditEntry{Time: now, Actor: catalog.ActorPeerPrefix + n.Peer, Action: catalog.AuditBackReference,
				Kind: cur.Kind, Namespace: cur.Namespace, Name: cur.Name, UID: cur.UID, FromPhase: cur.Phase, ToPhase: cur.Phase,
				Reason: "referenced by " + n.Referrer.String() + " on peer " + n.Peer + " (" + string(n.OnTargetDelete) + ")", Details: details}),
		})
		out = &n
		return err
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return out, nil
}

// BackReferences implements catalog.Store.
func (s *Store) BackReferences(ctx context.Context, target catalog.Key) ([]*catalog.BackReference, error) {
	rows, err := s.queryBackRefs(ctx, s.b.Reader(), target)
	return rows, s.mapErr(err)
}

func (s *Store) queryBackRefs(ctx context.Context, q Querier, target catalog.Key) ([]*catalog.BackReference, error) {
	sql := `SELECT ` + backRefColumns + ` FROM peer_back_references`
	var args []any
	if target != (catalog.Key{}) {
		sql += ` WHERE target_kind = $1 AND target_namespace = $2 AND target_name = $3`
		args = []any{target.Kind, target.Namespace, target.Name}
	}
	rows, err := q.Query(ctx, sql+` ORDER BY target_kind, target_namespace, target_name, peer, referrer_uid`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*catalog.BackReference
	for rows.Next() {
		b, err := scanBackRef(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// heldByPeers refuses to let cur go toward deletion while a peer holds a
// back-reference to it: cross-peer deletion is not implemented yet, and
// a remote referrer nobody asked is unknown, never absent. It runs in the
// write transaction that holds cur's row lock, which RegisterBackReference
// takes too.
func (s *Store) heldByPeers(ctx context.Context, q Querier, cur *catalog.Resource, to catalog.Phase) error {
	bs, err := s.queryBackRefs(ctx, q, cur.Key())
	if err != nil || len(bs) == 0 {
		return err
	}
	b := bs[0]
	return transitionErr(cur, to, fmt.Sprintf("referenced from %d resource(s) on other peers (first: %s on peer %s); deletion across peers is not implemented yet",
		len(bs), termtext.Quote(b.Referrer.String()), termtext.Quote(b.Peer)))
}

// peerEdgesGone runs in the transaction that purges the resources uids:
// their forward edges go with them, and each peer that may hold a stub
// for one (an edge not Refused) is told, through the outbox, to drop it.
// A registration not yet sent and not in flight is cancelled: it can
// have made no stub.
func (s *Store) peerEdgesGone(ctx context.Context, q Querier, uids []string, now time.Time) error {
	for len(uids) > 0 {
		n := min(len(uids), 500)
		chunk := uids[:n]
		uids = uids[n:]
		ph := make([]string, len(chunk))
		args := make([]any, len(chunk))
		for i, u := range chunk {
			ph[i], args[i] = fmt.Sprintf("$%d", i+1), u
		}
		in := `(` + strings.Join(ph, ", ") + `)`
		rows, err := q.Query(ctx, `SELECT `+peerRefColumns+` FROM peer_references WHERE referrer_uid IN `+in, args...)
		if err != nil {
			return err
		}
		var edges []*catalog.PeerReference
		for rows.Next() {
			e, err := scanPeerRef(rows)
			if err != nil {
				rows.Close()
				return err
			}
			edges = append(edges, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(edges) == 0 {
			continue
		}
		stmts := []Stmt{{SQL: `DELETE FROM peer_references WHERE referrer_uid IN ` + in, Args: args}}
		for _, e := range edges {
			if e.State == catalog.PeerEdgeRefused {
				continue // the peer said no: it holds no stub
			}
			stmts = append(stmts, Stmt{SQL: `UPDATE peer_messages SET state = $1, available_at = NULL, last_error = $2
WHERE peer = $3 AND type = $4 AND idempotency_key = $5 AND state = $6 AND holder = '' AND attempts = 0`,
				Args: []any{string(catalog.NotificationFailed), "cancelled: its referrer was purged before it was sent",
					e.Peer, string(catalog.PeerMsgRegisterBackReference), e.IdempotencyKey, string(catalog.NotificationPending)}})
			body, err := json.Marshal(e)
			if err != nil {
				return err
			}
			stmts = append(stmts,
				Stmt{SQL: `INSERT INTO peer_messages (peer, type, idempotency_key, epoch, body, state, next_attempt_at, available_at, created_at)
SELECT CAST($1 AS TEXT), CAST($2 AS TEXT), CAST($3 AS TEXT), 0, CAST($4 AS TEXT), CAST($5 AS TEXT),
  CAST($6 AS BIGINT), CAST($6 AS BIGINT), CAST($6 AS BIGINT) WHERE EXISTS (
  SELECT 1 FROM peer_messages WHERE peer = $1 AND type = $7 AND idempotency_key = $3 AND (state <> $8 OR attempts > 0))
ON CONFLICT (peer, type, idempotency_key, epoch) DO NOTHING`,
					Args: []any{e.Peer, string(catalog.PeerMsgDropBackReference), e.IdempotencyKey, string(body),
						string(catalog.NotificationPending), now.UnixNano(), string(catalog.PeerMsgRegisterBackReference), string(catalog.NotificationFailed)}},
				auditStmt(catalog.AuditEntry{Time: now, Actor: catalog.ActorFrom(ctx), Action: catalog.AuditPeerReferenceDropped,
					Kind: e.Referrer.Kind, Namespace: e.Referrer.Namespace, Name: e.Referrer.Name, UID: e.Referrer.UID,
					FromPhase: catalog.PhaseDeleting, ToPhase: catalog.PhasePurged,
					Reason: "purged: peer " + e.Peer + " is told to drop its back-reference to " + e.Target.String()}))
		}
		if err := q.ExecBatch(ctx, stmts); err != nil {
			return err
		}
	}
	return nil
}

// DropBackReference implements catalog.Store.
func (s *Store) DropBackReference(ctx context.Context, b catalog.BackReference) (bool, error) {
	if b.Peer == "" || b.IdempotencyKey == "" || b.Referrer.UID == "" {
		return false, fmt.Errorf("%w: dropping a back-reference needs its peer, idempotency key and referrer uid", catalog.ErrInvalid)
	}
	now := s.clock()
	dropped := false
	err := s.writeTx(ctx, func(q Querier) error {
		old, err := scanBackRef(q.QueryRow(ctx, `SELECT `+backRefColumns+` FROM peer_back_references WHERE peer = $1 AND idempotency_key = $2`+s.d.ForUpdate,
			b.Peer, b.IdempotencyKey))
		switch {
		case errors.Is(err, ErrNoRows):
			return nil // gone already: a replay
		case err != nil:
			return err
		}
		if old.Referrer.UID != b.Referrer.UID || old.Target != b.Target {
			return fmt.Errorf("%w: back-reference %s of peer %s is from %s to %s, not from %s to %s", catalog.ErrInvalid,
				termtext.Quote(b.IdempotencyKey), termtext.Quote(b.Peer), termtext.Quote(old.Referrer.String()), termtext.Quote(old.Target.String()),
				termtext.Quote(b.Referrer.String()), termtext.Quote(b.Target.String()))
		}
		dropped = true
		// The target's row lock orders the drop with its lifecycle writes,
		// and its UID files the audit entry under it.
		uid, phase := "", catalog.Phase("")
		if cur, err := s.getOne(ctx, q, old.Target.String(), resourceByKey+s.d.ForUpdate, old.Target.Kind, old.Target.Namespace, old.Target.Name); err == nil {
			uid, phase = cur.UID, cur.Phase
		} else if !errors.Is(err, catalog.ErrNotFound) {
			return err
		}
		details, _ := json.Marshal(map[string]any{"peer": old.Peer, "referrer": old.Referrer, "idempotencyKey": old.IdempotencyKey})
		return q.ExecBatch(ctx, []Stmt{
			{SQL: `DELETE FROM peer_back_references WHERE peer = $1 AND idempotency_key = $2`, Args: []any{b.Peer, b.IdempotencyKey}},
			auditStmt(catalog.AuditEntry{Time: now, Actor: catalog.ActorPeerPrefix + old.Peer, Action: catalog.AuditBackReferenceDropped,
				Kind: old.Target.Kind, Namespace: old.Target.Namespace, Name: old.Target.Name, UID: uid, FromPhase: phase, ToPhase: phase,
				Reason: "no longer referenced by " + old.Referrer.String() + " on peer " + old.Peer + " (purged there)", Details: details}),
		})
	})
	if err != nil {
		return false, s.mapErr(err)
	}
	return dropped, nil
}
