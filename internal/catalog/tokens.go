package catalog

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// TokenRole is what an API token may do (DESIGN §11): a viewer reads, an
// operator also writes.
type TokenRole string

// The roles.
const (
	TokenViewer   TokenRole = "viewer"
	TokenOperator TokenRole = "operator"
)

// Valid reports whether r is a known role.
func (r TokenRole) Valid() bool { return r == TokenViewer || r == TokenOperator }

// Token is an API bearer token as the catalog keeps it: its name, role
// and the SHA-256 of its secret. The secret itself is never stored; it is
// shown once, when the token is created (internal/apitoken).
type Token struct {
	Name string    `json:"name"`
	Role TokenRole `json:"role"`
	// Hash is the hex SHA-256 of the secret (64 lowercase hex digits).
	Hash      string    `json:"-"`
	CreatedAt time.Time `json:"createdAt"`
	CreatedBy string    `json:"createdBy"`
	// Login marks a console login (lethe console url): its secret is
	// exchanged once for a console session (ExchangeLogin), and is no
	// bearer token. UsedAt is when it was exchanged.
	Login  bool       `json:"login,omitempty"`
	UsedAt *time.Time `json:"usedAt,omitempty"`
}

// Token audit entries: kind AuditKindToken, name the token's name.
const (
	AuditKindToken    = "APIToken"
	AuditTokenCreated = "token-create"
	AuditTokenRevoked = "token-revoke"
	AuditTokenLogin   = "token-login"
)

var (
	tokenNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)
	tokenHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidateTokenName checks a token's name: a DNS label-like name of 1 to
// 63 lowercase letters, digits, '-' and '.'.
func ValidateTokenName(name string) error {
	if !tokenNameRE.MatchString(name) {
		return fmt.Errorf("%w: token name %q: use 1 to 63 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit", ErrInvalid, name)
	}
	return nil
}

// ValidateToken checks a token before it is stored: its name, its role,
// and that Hash has the shape of a hash (so a secret cannot be stored in
// its place by mistake).
func ValidateToken(t *Token) error {
	if err := ValidateTokenName(t.Name); err != nil {
		return err
	}
	if !t.Role.Valid() {
		return fmt.Errorf("%w: token role %q: use viewer or operator", ErrInvalid, t.Role)
	}
	if !tokenHashRE.MatchString(t.Hash) {
		return fmt.Errorf("%w: token hash: want 64 lowercase hex digits (a SHA-256)", ErrInvalid)
	}
	return nil
}

// Tokens stores the API's bearer tokens, by hash.
type Tokens interface {
	// CreateToken stores t (CreatedAt and CreatedBy are set from the
	// clock and the context's actor) and audits it (AuditTokenCreated),
	// in one transaction. ErrInvalid if ValidateToken refuses it,
	// ErrAlreadyExists if the name or the hash is taken.
	CreateToken(ctx context.Context, t Token) (*Token, error)
	// ListTokens lists every token, by name.
	ListTokens(ctx context.Context) ([]*Token, error)
	// TokenByHash finds the token whose secret hashes to hash;
	// ErrNotFound if none (never created, or revoked).
	TokenByHash(ctx context.Context, hash string) (*Token, error)
	// RevokeToken deletes the named token and audits it
	// (AuditTokenRevoked), in one transaction; ErrNotFound if there is
	// none. It returns the token as it was.
	RevokeToken(ctx context.Context, name string) (*Token, error)
	// ExchangeLogin uses the login token whose hash is hash, once: it
	// must be a Login token, unused, created after notBefore; it is then
	// marked used (UsedAt) and audited (AuditTokenLogin), in one
	// transaction. ErrNotFound for any other hash, ErrConflict for a
	// login already used or too old. Two concurrent exchanges of one
	// login: one wins.
	ExchangeLogin(ctx context.Context, hash string, notBefore time.Time) (*Token, error)
}
