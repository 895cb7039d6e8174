// Package apitoken makes and checks the API's bearer tokens (DESIGN §11).
// A token's secret is 32 random bytes, shown once when it is made; the
// catalog keeps only its SHA-256 (catalog.Tokens). It owns the secret's
// format and hashing, and must not touch HTTP.
package apitoken

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

// Prefix starts every secret, so a leaked one is recognisable (secret
// scanners, logs).
const Prefix = "lethe_"

// secretBytes is the secret's entropy.
const secretBytes = 32

// ErrUnauthenticated is the error of a secret that is malformed, unknown
// or revoked.
var ErrUnauthenticated = errors.New("the token is not valid (unknown, revoked or malformed)")

// Store is the catalog role this package uses.
type Store interface {
	catalog.Tokens
}

// Hash is the hex SHA-256 of secret: what the catalog stores.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewSecret returns a fresh secret: Prefix and 32 random bytes in
// unpadded base64url.
func NewSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return Prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// wellFormed reports whether s has the shape of a secret NewSecret makes.
func wellFormed(s string) bool {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil && len(b) == secretBytes
}

// Create makes a token named name with role, stores its hash, and returns
// the secret (the only time it exists outside the caller) with the stored
// token.
func Create(ctx context.Context, st Store, name string, role catalog.TokenRole) (string, *catalog.Token, error) {
	if err := catalog.ValidateTokenName(name); err != nil {
		return "", nil, err
	}
	if !role.Valid() {
		return "", nil, fmt.Errorf("%w: role %q: use viewer or operator", catalog.ErrInvalid, role)
	}
	secret, err := NewSecret()
	if err != nil {
		return "", nil, err
	}
	t, err := st.CreateToken(ctx, catalog.Token{Name: name, Role: role, Hash: Hash(secret)})
	if err != nil {
		return "", nil, err
	}
	return secret, t, nil
}

// Check returns the token secret belongs to; ErrUnauthenticated when
// there is none.
func Check(ctx context.Context, st Store, secret string) (*catalog.Token, error) {
	if !wellFormed(secret) {
		return nil, ErrUnauthenticated
	}
	t, err := st.TokenByHash(ctx, Hash(secret))
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, ErrUnauthenticated
	}
	if err != nil {
		return nil, err
	}
	if t.Login {
		return nil, ErrUnauthenticated // a console login opens a session, once; it is no bearer token
	}
	return t, nil
}

// LoginTTL is how long a console login URL can be used.
const LoginTTL = 10 * time.Minute

// CreateLogin makes a console login with role (lethe console url): a
// token named console-<random> whose secret is exchanged once, within
// LoginTTL, for a console session.
func CreateLogin(ctx context.Context, st Store, role catalog.TokenRole) (string, *catalog.Token, error) {
	if !role.Valid() {
		return "", nil, fmt.Errorf("%w: role %q: use viewer or operator", catalog.ErrInvalid, role)
	}
	secret, err := NewSecret()
	if err != nil {
		return "", nil, err
	}
	name := "console-" + Hash(secret)[:8]
	t, err := st.CreateToken(ctx, catalog.Token{Name: name, Role: role, Hash: Hash(secret), Login: true})
	if err != nil {
		return "", nil, err
	}
	return secret, t, nil
}

// ExchangeLogin uses a console login's secret, once (see
// catalog.Tokens.ExchangeLogin); ErrUnauthenticated when it is not a
// login, and catalog.ErrConflict when it was used or has expired.
func ExchangeLogin(ctx context.Context, st Store, secret string, now time.Time) (*catalog.Token, error) {
	if !wellFormed(secret) {
		return nil, ErrUnauthenticated
	}
	t, err := st.ExchangeLogin(ctx, Hash(secret), now.Add(-LoginTTL))
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, ErrUnauthenticated
	}
	return t, err
}

// Actor is the audit actor of a write made with t: "token:NAME".
func Actor(t *catalog.Token) string { return "token:" + t.Name }
