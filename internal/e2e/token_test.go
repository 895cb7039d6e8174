package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// catalogBackends runs f on a SQLite catalog and, when
// LETHE_TEST_POSTGRES_URL is set, on a PostgreSQL one of its own. raw
// returns every byte the catalog stores (the SQLite files; a dump of the
// api_tokens and audit tables on PostgreSQL).
func catalogBackends(t *testing.T, f func(t *testing.T, e *env, raw func() string)) {
	t.Run("sqlite", func(t *testing.T) {
		e := newEnv(t)
		f(t, e, func() string {
			var all strings.Builder
			matches, _ := filepath.Glob(filepath.Join(e.home, "lethe.db*"))
			require.NotEmpty(t, matches)
			for _, m := range matches {
				b, err := os.ReadFile(m)
				require.NoError(t, err)
				all.Write(b)
			}
			return all.String()
		})
	})
	t.Run("postgres", func(t *testing.T) {
		admin := os.Getenv("LETHE_TEST_POSTGRES_URL")
		if admin == "" {
			t.Skip("set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
		}
		store := createDatabase(t, admin)
		e := newEnv(t)
		e.extra = append(e.extra, "LETHE_STORE="+store)
		f(t, e, func() string {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, store)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var dump string
			require.NoError(t, conn.QueryRow(ctx, `SELECT COALESCE((SELECT string_agg(t::text, E'\n') FROM api_tokens t), '') ||
  COALESCE((SELECT string_agg(a::text, E'\n') FROM audit a), '')`).Scan(&dump))
			return dump
		})
	})
}

// TestTokens: lethe token create prints a secret once and the catalog
// keeps only its SHA-256; list shows names and roles, never a secret or a
// hash; revoke removes it; both are audited; bad input is refused with one
// line and changes nothing.
func TestTokens(t *testing.T) {
	catalogBackends(t, func(t *testing.T, e *env, raw func() string) {
		r := e.ok("token", "create", "ci", "--role", "operator")
		secret := strings.TrimSpace(r.stdout)
		require.True(t, strings.HasPrefix(secret, "lethe_"), "%s", r)
		require.Len(t, secret, len("lethe_")+43)
		assert.Contains(t, r.stderr, "its secret was written to standard output, once")
		sum := sha256.Sum256([]byte(secret))
		hash := hex.EncodeToString(sum[:])
		e.ok("token", "create", "dash", "--role", "viewer")

		stored := raw()
		assert.Contains(t, stored, hash, "the catalog keeps the secret's SHA-256")
		assert.NotContains(t, stored, secret, "the catalog never holds the secret")
		assert.NotContains(t, stored, strings.TrimPrefix(secret, "lethe_"), "not even without its prefix")

		r = e.ok("token", "list", "-o", "json")
		assert.NotContains(t, r.stdout, secret)
		assert.NotContains(t, r.stdout, hash)
		var list struct {
			Kind  string `json:"kind"`
			Items []struct {
				Kind, Name, Role, CreatedBy string
			} `json:"items"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
		assert.Equal(t, "APITokenList", list.Kind)
		require.Len(t, list.Items, 2)
		assert.Equal(t, "APIToken", list.Items[0].Kind)
		assert.Equal(t, "ci", list.Items[0].Name)
		assert.Equal(t, "operator", list.Items[0].Role)
		assert.Equal(t, "dash", list.Items[1].Name)
		assert.Equal(t, "viewer", list.Items[1].Role)
		assert.True(t, strings.HasPrefix(list.Items[0].CreatedBy, "cli:"), list.Items[0].CreatedBy)
		r = e.ok("token", "list", "-o", "yaml")
		assert.Contains(t, r.stdout, "kind: APITokenList")

		// Bad input: one line, exit 2, nothing stored.
		for _, args := range [][]string{
			{"token", "create", "x", "--role", "admin"},
			{"token", "create", "x"},
			{"token", "create", "Bad_Name", "--role", "viewer"},
			{"token", "revoke", "Bad_Name"},
		} {
			r := e.run(args...)
			require.Equal(t, 2, r.code, "%s", r)
			requireOneErrorLine(t, r, "")
		}
		r = e.run("token", "create", "ci", "--role", "viewer")
		require.Equal(t, 1, r.code, "%s", r)
		requireOneErrorLine(t, r, "token ci already exists")
		r = e.run("token", "revoke", "nope")
		require.Equal(t, 4, r.code, "%s", r)
		requireOneErrorLine(t, r, "token nope not found")

		r = e.ok("token", "revoke", "dash")
		assert.Contains(t, r.stdout, "token dash (viewer) revoked")
		r = e.ok("token", "list")
		assert.Contains(t, r.stdout, "ci")
		assert.NotContains(t, r.stdout, "dash")

		r = e.ok("audit", "--kind", "APIToken", "-o", "json")
		var audit struct {
			Items []struct{ Action, Actor string } `json:"items"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &audit), r.stdout)
		var actions []string
		for _, it := range audit.Items {
			actions = append(actions, it.Action)
			assert.True(t, strings.HasPrefix(it.Actor, "cli:"), it.Actor)
		}
		assert.Equal(t, []string{"token-create", "token-create", "token-revoke"}, actions)
	})
}
