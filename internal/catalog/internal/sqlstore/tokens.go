package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

const tokenColumns = `name, role, hash, created_at, created_by`

// notFound maps ErrNoRows to catalog.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, ErrNoRows) {
		return catalog.ErrNotFound
	}
	return err
}

func scanToken(r interface{ Scan(...any) error }) (*catalog.Token, error) {
	var (
		t       catalog.Token
		role    string
		created int64
	)
	if err := r.Scan(&t.Name, &role, &t.Hash, &created, &t.CreatedBy); err != nil {
		return nil, err
	}
	t.Role, t.CreatedAt = catalog.TokenRole(role), fromNanos(created)
	return &t, nil
}

func tokenAudit(ctx context.Context, q Querier, when time.Time, t *catalog.Token, action, actor, reason string) error {
	details, err := json.Marshal(map[string]any{"role": t.Role})
	if err != nil {
		return err
	}
	st := auditStmt(catalog.AuditEntry{Time: when, Actor: actor, Action: action,
		Kind: catalog.AuditKindToken, Name: t.Name, Reason: reason, Details: details})
	_, err = q.Exec(ctx, st.SQL, st.Args...)
	return err
}

// CreateToken implements catalog.Store.
func (s *Store) CreateToken(ctx context.Context, t catalog.Token) (*catalog.Token, error) {
	if err := catalog.ValidateToken(&t); err != nil {
		return nil, err
	}
	t.CreatedAt, t.CreatedBy = s.clock(), catalog.ActorFrom(ctx)
	var out *catalog.Token
	err := s.b.WriteTx(ctx, func(q Querier) error {
		var err error
		out, err = scanToken(q.QueryRow(ctx, `INSERT INTO api_tokens (`+tokenColumns+`) VALUES ($1, $2, $3, $4, $5) RETURNING `+tokenColumns,
			t.Name, string(t.Role), t.Hash, t.CreatedAt.UnixNano(), t.CreatedBy))
		if err != nil {
			return err
		}
		return tokenAudit(ctx, q, t.CreatedAt, out, catalog.AuditTokenCreated, t.CreatedBy, "created with role "+string(t.Role))
	})
	if err != nil {
		return nil, fmt.Errorf("token %s: %w", t.Name, s.mapErr(err))
	}
	return out, nil
}

// ListTokens implements catalog.Store.
func (s *Store) ListTokens(ctx context.Context) ([]*catalog.Token, error) {
	rows, err := s.b.Reader().Query(ctx, `SELECT `+tokenColumns+` FROM api_tokens ORDER BY name`)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	var out []*catalog.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, s.mapErr(err)
		}
		out = append(out, t)
	}
	return out, s.mapErr(rows.Err())
}

// TokenByHash implements catalog.Store.
func (s *Store) TokenByHash(ctx context.Context, hash string) (*catalog.Token, error) {
	t, err := scanToken(s.b.Reader().QueryRow(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE hash = $1`, hash))
	if err != nil {
		return nil, s.mapErr(notFound(err))
	}
	return t, nil
}

// RevokeToken implements catalog.Store.
func (s *Store) RevokeToken(ctx context.Context, name string) (*catalog.Token, error) {
	actor := catalog.ActorFrom(ctx)
	now := s.clock()
	var out *catalog.Token
	err := s.b.WriteTx(ctx, func(q Querier) error {
		var err error
		out, err = scanToken(q.QueryRow(ctx, `DELETE FROM api_tokens WHERE name = $1 RETURNING `+tokenColumns, name))
		if err != nil {
			return err
		}
		return tokenAudit(ctx, q, now, out, catalog.AuditTokenRevoked, actor, "revoked")
	})
	if err != nil {
		return nil, fmt.Errorf("token %s: %w", name, s.mapErr(notFound(err)))
	}
	return out, nil
}
