package apitoken

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// fakeStore is catalog.Tokens in a map, counting lookups.
type fakeStore struct {
	catalog.Tokens
	byHash  map[string]*catalog.Token
	lookups int
}

func (f *fakeStore) CreateToken(_ context.Context, t catalog.Token) (*catalog.Token, error) {
	if err := catalog.ValidateToken(&t); err != nil {
		return nil, err
	}
	f.byHash[t.Hash] = &t
	return &t, nil
}

func (f *fakeStore) TokenByHash(_ context.Context, hash string) (*catalog.Token, error) {
	f.lookups++
	if t, ok := f.byHash[hash]; ok {
		return t, nil
	}
	return nil, catalog.ErrNotFound
}

func TestSecretsAreRandomAndStoredByHashOnly(t *testing.T) {
	ctx := context.Background()
	st := &fakeStore{byHash: map[string]*catalog.Token{}}
	secret, tok, err := Create(ctx, st, "ci", catalog.TokenOperator)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(secret, Prefix))
	assert.Len(t, secret, len(Prefix)+43, "32 bytes, unpadded base64url")
	assert.Equal(t, Hash(secret), tok.Hash)
	assert.NotContains(t, tok.Hash, strings.TrimPrefix(secret, Prefix))
	// SHA-256 of "abc", hex.
	assert.Equal(t, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", Hash("abc"))
	other, _, err := Create(ctx, st, "ci2", catalog.TokenViewer)
	require.NoError(t, err)
	assert.NotEqual(t, secret, other)

	got, err := Check(ctx, st, secret)
	require.NoError(t, err)
	assert.Equal(t, "ci", got.Name)
	n := st.lookups
	for _, bad := range []string{"", "lethe_", secret + "x", strings.TrimPrefix(secret, Prefix), "Bearer " + secret} {
		_, err := Check(ctx, st, bad)
		require.ErrorIs(t, err, ErrUnauthenticated, "%q", bad)
	}
	assert.Equal(t, n, st.lookups, "a malformed secret is refused without a lookup")
	_, err = Check(ctx, st, Prefix+strings.Repeat("A", 43))
	require.ErrorIs(t, err, ErrUnauthenticated, "well formed but unknown")

	login, _, err := CreateLogin(ctx, st, catalog.TokenViewer)
	require.NoError(t, err)
	_, err = Check(ctx, st, login)
	require.ErrorIs(t, err, ErrUnauthenticated, "a console login is no bearer token")
}
