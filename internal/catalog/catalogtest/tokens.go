package catalogtest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testTokens: a token is stored by hash, found by hash, listed by name,
// and revoked; a name or hash is taken once; a value that is not a hash is
// refused; creation and revocation are audited in the actor's name.
func testTokens(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	h1, h2 := strings.Repeat("a1", 32), strings.Repeat("b2", 32)

	got, err := f.s.CreateToken(f.ctx, catalog.Token{Name: "ci", Role: catalog.TokenOperator, Hash: h1})
	require.NoError(t, err)
	assert.Equal(t, "ci", got.Name)
	assert.Equal(t, catalog.TokenOperator, got.Role)
	assert.Equal(t, h1, got.Hash)
	assert.Equal(t, "tester", got.CreatedBy)
	assert.True(t, got.CreatedAt.Equal(Epoch), "created at %s", got.CreatedAt)
	f.clock.Advance(time.Minute)
	_, err = f.s.CreateToken(f.ctx, catalog.Token{Name: "alice", Role: catalog.TokenViewer, Hash: h2})
	require.NoError(t, err)

	_, err = f.s.CreateToken(f.ctx, catalog.Token{Name: "ci", Role: catalog.TokenViewer, Hash: strings.Repeat("c3", 32)})
	require.ErrorIs(t, err, catalog.ErrAlreadyExists, "a taken name")
	_, err = f.s.CreateToken(f.ctx, catalog.Token{Name: "bob", Role: catalog.TokenViewer, Hash: h1})
	require.ErrorIs(t, err, catalog.ErrAlreadyExists, "a taken hash")
	for _, bad := range []catalog.Token{
		{Name: "raw", Role: catalog.TokenViewer, Hash: "lethe_secret-not-a-hash"},
		{Name: "upper", Role: catalog.TokenViewer, Hash: strings.Repeat("A1", 32)},
		{Name: "Bad_Name", Role: catalog.TokenViewer, Hash: strings.Repeat("d4", 32)},
		{Name: "admin", Role: "admin", Hash: strings.Repeat("e5", 32)},
	} {
		_, err = f.s.CreateToken(f.ctx, bad)
		require.ErrorIs(t, err, catalog.ErrInvalid, "%+v", bad)
	}

	list, err := f.s.ListTokens(f.ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, "alice", list[0].Name)
	assert.Equal(t, catalog.TokenViewer, list[0].Role)
	assert.Equal(t, "ci", list[1].Name)

	byHash, err := f.s.TokenByHash(f.ctx, h2)
	require.NoError(t, err)
	assert.Equal(t, "alice", byHash.Name)
	_, err = f.s.TokenByHash(f.ctx, strings.Repeat("f6", 32))
	require.ErrorIs(t, err, catalog.ErrNotFound)

	f.clock.Advance(time.Minute)
	gone, err := f.s.RevokeToken(catalog.WithActor(f.ctx, "root"), "alice")
	require.NoError(t, err)
	assert.Equal(t, catalog.TokenViewer, gone.Role)
	_, err = f.s.TokenByHash(f.ctx, h2)
	require.ErrorIs(t, err, catalog.ErrNotFound, "a revoked token is not found")
	_, err = f.s.RevokeToken(f.ctx, "alice")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	list, err = f.s.ListTokens(f.ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)

	es, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: catalog.AuditKindToken})
	require.NoError(t, err)
	require.Len(t, es, 3, "two creations and one revocation; refusals are not audited")
	assert.Equal(t, catalog.AuditTokenCreated, es[0].Action)
	assert.Equal(t, "ci", es[0].Name)
	assert.Equal(t, "tester", es[0].Actor)
	assert.JSONEq(t, `{"role":"operator"}`, string(es[0].Details))
	assert.Equal(t, catalog.AuditTokenRevoked, es[2].Action)
	assert.Equal(t, "alice", es[2].Name)
	assert.Equal(t, "root", es[2].Actor)
	assert.True(t, es[2].Time.Equal(Epoch.Add(2*time.Minute)), "revoked at %s", es[2].Time)
	for _, e := range es {
		assert.NotContains(t, string(e.Details), h1, "the audit log does not hold hashes")
	}
}

// testExchangeLogin: a console login is exchanged once, only before it
// expires, only if it is a login; the exchange is audited.
func testExchangeLogin(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	hl, hb, hold := strings.Repeat("1a", 32), strings.Repeat("2b", 32), strings.Repeat("3c", 32)
	_, err := f.s.CreateToken(f.ctx, catalog.Token{Name: "console-1", Role: catalog.TokenOperator, Hash: hl, Login: true})
	require.NoError(t, err)
	_, err = f.s.CreateToken(f.ctx, catalog.Token{Name: "ci", Role: catalog.TokenOperator, Hash: hb})
	require.NoError(t, err)
	_, err = f.s.CreateToken(f.ctx, catalog.Token{Name: "console-old", Role: catalog.TokenViewer, Hash: hold, Login: true})
	require.NoError(t, err)

	_, err = f.s.ExchangeLogin(f.ctx, hb, Epoch)
	require.ErrorIs(t, err, catalog.ErrNotFound, "a bearer token is no login")
	_, err = f.s.ExchangeLogin(f.ctx, strings.Repeat("4d", 32), Epoch)
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = f.s.ExchangeLogin(f.ctx, hold, Epoch.Add(time.Second))
	require.ErrorIs(t, err, catalog.ErrConflict, "a login created before notBefore has expired")

	f.clock.Advance(time.Minute)
	got, err := f.s.ExchangeLogin(catalog.WithActor(f.ctx, "browser"), hl, Epoch)
	require.NoError(t, err)
	assert.Equal(t, "console-1", got.Name)
	assert.True(t, got.Login)
	require.NotNil(t, got.UsedAt)
	assert.True(t, got.UsedAt.Equal(Epoch.Add(time.Minute)))
	_, err = f.s.ExchangeLogin(f.ctx, hl, Epoch)
	require.ErrorIs(t, err, catalog.ErrConflict, "a login is used once")
	byHash, err := f.s.TokenByHash(f.ctx, hl)
	require.NoError(t, err, "the used login still names its session's token until revoked")
	assert.NotNil(t, byHash.UsedAt)

	es, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{Kind: catalog.AuditKindToken, Name: "console-1"})
	require.NoError(t, err)
	require.Len(t, es, 2)
	assert.Equal(t, catalog.AuditTokenLogin, es[1].Action)
	assert.Equal(t, "browser", es[1].Actor)
}
