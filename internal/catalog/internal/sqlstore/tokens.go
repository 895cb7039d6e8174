package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

const tokenColumns = `name, role, hash, created_at, created_by, login, used_at` //nolint:gosec // column names, not a credential

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
		used    int64
	)
	if err := r.Scan(&t.Name, &role, &t.Hash, &created, &t.CreatedBy, &t.Login, &used); err != nil {
		return nil, err
	}
	t.Role, t.CreatedAt = catalog.TokenRole(role), fromNanos(created)
	if used != 0 {
		u := fromNanos(used)
		t.UsedAt = &u
	}
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
		out, err = scanToken(q.QueryRow(ctx, `INSERT INTO api_tokens (`+tokenColumns+`) VALUES ($1, $2, $3, $4, $5, $6, 0) RETURNING `+tokenColumns,
			t.Name, string(t.Role), t.Hash, t.CreatedAt.UnixNano(), t.CreatedBy, t.Login))
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

// ExchangeLogin implements catalog.Store.
func (s *Store) ExchangeLogin(ctx context.Context, hash string, notBefore time.Time) (*catalog.Token, error) {
	actor := catalog.ActorFrom(ctx)
	now := s.clock()
	var out *catalog.Token
	err := s.b.WriteTx(ctx, func(q Querier) error {
		cur, err := scanToken(q.QueryRow(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE hash = $1`+s.d.ForUpdate, hash))
		if err != nil {
			return notFound(err)
		}
		switch {
		case !cur.Login:
			return catalog.ErrNotFound
		case cur.UsedAt != nil:
			return fmt.Errorf("%w: the login %s was already used at %s", catalog.ErrConflict, cur.Name, cur.UsedAt.Format(time.RFC3339))
		case cur.CreatedAt.Before(notBefore):
			return fmt.Errorf("%w: the login %s has expired (created at %s)", catalog.ErrConflict, cur.Name, cur.CreatedAt.Format(time.RFC3339))
		}
		// used_at = 0 in the WHERE: of two exchanges, one wins.
		if out, err = scanToken(q.QueryRow(ctx, `UPDATE api_tokens SET used_at = $2 WHERE hash = $1 AND used_at = 0 RETURNING `+tokenColumns,
			hash, now.UnixNano())); err != nil {
			return notFound(err)
		}
		return tokenAudit(ctx, q, now, out, catalog.AuditTokenLogin, actor, "console login used")
	})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return out, nil
}
