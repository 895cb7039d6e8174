package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore/s3test"
)

// pgSecret is the catalog password TestNoSecretInOutput hides. The test
// server trusts every local connection, so any password works.
const pgSecret = "pg-S3cr3t-9f2c"

// TestNoSecretInOutput is issue 9 point 6: lethe runs with a password in
// its PostgreSQL address (in the user info and in the query) and an S3
// secret key in its storage address, through create, list, get, audit, a
// deletion run by `lethe server` with debug logs, and bad input; no
// stdout, stderr, audit entry or plugin record holds a secret, while the
// server banner does show the (redacted) addresses.
func TestNoSecretInOutput(t *testing.T) {
	t.Parallel()
	admin := os.Getenv("LETHE_TEST_POSTGRES_URL")
	if admin == "" {
		t.Skip("set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	}
	srv := s3test.StartServer(t)
	store := passwordURL(t, createDatabase(t, admin))
	secrets := []string{pgSecret, s3test.SecretKey, url.QueryEscape(s3test.SecretKey), url.PathEscape(s3test.SecretKey), s3test.AccessKey}
	require.Contains(t, store, pgSecret)
	require.Contains(t, srv.URL, url.PathEscape(s3test.SecretKey))

	e := newEnv(t, pluginRecorder)
	global := []string{"--store", store, "--storage", srv.URL, "--log-level", "debug"}
	var results []result
	run := func(code int, args ...string) result {
		t.Helper()
		r := e.run(append(slices.Clone(global), args...)...)
		require.Equal(t, code, r.code, "%s", r)
		results = append(results, r)
		return r
	}
	run(0, "backup", "create", "now", "--from", e.writeTarball("now", 5))
	run(0, "backup", "create", "later", "--from", e.writeTarball("later", 5))
	run(0, "backup", "list", "-o", "json")
	run(0, "backup", "list", "-o", "yaml")
	run(0, "backup", "get", "now", "-o", "json")
	run(0, "backup", "delete", "now", "--yes", "-o", "json")
	run(0, "backup", "delete", "later", "--yes", "--async")

	// The server runs the requested deletion (pinned plugins only).
	run(0, "plugin", "lock")
	p := e.start(append(slices.Clone(global), "server")...)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := e.run(append(slices.Clone(global), "backup", "get", "later")...)
		if r.code == 4 && strings.Contains(r.stderr, "was purged") {
			break
		}
		require.False(t, p.exited(), "the server stopped")
		require.True(t, time.Now().Before(deadline), "the server did not purge the backup: %s", r)
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	sr := p.wait(t)
	results = append(results, sr)
	require.Contains(t, sr.stderr, "lethe server: catalog postgres://postgres:xxxxx@", "the banner shows the catalog, redacted")
	require.Contains(t, sr.stderr, "password=xxxxx")
	require.Contains(t, sr.stderr, "storage s3://"+s3test.Bucket+"?endpoint=", "the banner shows the storage, redacted")

	run(0, "audit", "-o", "json")
	run(0, "audit", "-o", "yaml")
	run(0, "backup", "list")
	require.Contains(t, run(0, "backup", "sync").stdout, "No tarballs in s3://"+s3test.Bucket+"?endpoint=")

	// Bad input that makes lethe repeat the address.
	bad := []struct{ store, storage string }{
		{"host=127.0.0.1 user=postgres password=" + pgSecret, srv.URL},
		{strings.Replace(store, "sslmode=disable", "sslmode=bogus", 1), srv.URL},
		{store, "s3://" + s3test.AccessKey + ":" + url.PathEscape(s3test.SecretKey) + "@" + s3test.Bucket + "?region=r&session_token=" + pgSecret},
		{store, "s3://" + s3test.Bucket + "?region=r&endpoint=ftp://" + s3test.AccessKey + ":" + pgSecret + "@host"},
	}
	for _, b := range bad {
		r := e.run("--store", b.store, "--storage", b.storage, "backup", "sync", "--dry-run")
		require.NotEqual(t, 0, r.code, "%s", r)
		requireOneErrorLine(t, r, "")
		results = append(results, r)
	}

	record, err := os.ReadFile(e.record)
	require.NoError(t, err)
	require.NotEmpty(t, record, "the plugin ran")
	for _, s := range secrets {
		for _, r := range results {
			require.NotContains(t, r.stdout, s, "%s", r)
			require.NotContains(t, r.stderr, s, "%s", r)
		}
		require.NotContains(t, string(record), s, "plugin record")
	}
}

// createDatabase creates a database of its own on the server at admin,
// dropped when t ends, and returns its URL.
func createDatabase(t testing.TB, admin string) string {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "lethe_e2e_" + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	})
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// passwordURL puts pgSecret in raw's user info and in its query.
func passwordURL(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	user := "postgres"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, pgSecret)
	q := u.Query()
	q.Set("password", pgSecret)
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String()
}
