package drivers_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOpenSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lethe.db")
	s, err := drivers.Open(ctx, "sqlite://"+path, nil)
	require.NoError(t, err)
	r, err := s.Create(ctx, &catalog.Resource{Kind: "Backup", Name: "b"})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	// Reopening the same file sees the data.
	s, err = drivers.Open(ctx, "sqlite://"+path, nil)
	require.NoError(t, err)
	defer s.Close()
	got, err := s.Get(ctx, r.Key())
	require.NoError(t, err)
	assert.Equal(t, r.UID, got.UID)
}

func TestSQLitePath(t *testing.T) {
	for in, want := range map[string]string{
		"sqlite:///var/lib/lethe/catalog.db": "/var/lib/lethe/catalog.db",
		"sqlite:catalog.db":                  "catalog.db",
		"sqlite:data/catalog.db":             "data/catalog.db",
	} {
		got, err := drivers.SQLitePath(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"sqlite://host/x.db", "sqlite://", "sqlite:///x.db?mode=ro"} {
		_, err := drivers.SQLitePath(bad)
		assert.Error(t, err, bad)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{"mysql://u:secret@h/db", `unknown scheme "mysql"`},
		{"", "want sqlite:///path/to.db or postgres://"},
		{"/just/a/path.db", "want sqlite:///path/to.db or postgres://"},
		{"sqlite://relative/x.db", "absolute path after three slashes"},
		{"postgres://127.0.0.1:1/db?connect_timeout=1&sslmode=disable", "catalog: postgres"},
	} {
		_, err := drivers.Open(ctx, tc.url, nil)
		require.Error(t, err, tc.url)
		assert.Contains(t, err.Error(), tc.want, tc.url)
		assert.NotContains(t, err.Error(), "secret", "passwords are redacted")
		assert.NotContains(t, err.Error(), "\n", "one-line error")
	}
}

// TestOpenErrorsHideSecrets opens addresses that fail at every step (the
// scheme, the sqlite path, pgx's parser, the connection) and checks that
// no error repeats the password, whatever form it takes.
func TestOpenErrorsHideSecrets(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{"host=db user=lethe password=S3cr3t", "want sqlite:///path/to.db or postgres://"},
		{"host=db password=S3cr3t:5432", "want sqlite:///path/to.db or postgres://"},
		{"lethe:S3cr3t@db/lethe", `unknown scheme "lethe"`},
		{"mysql://u:S3cr3t@h/db?password=S3cr3t", `unknown scheme "mysql"`},
		{"sqlite://u:S3cr3t@host/x.db", "absolute path after three slashes"},
		{"sqlite:///x.db?password=S3cr3t", "takes no query"},
		{"sqlite://u:S3cr3t%zz@host/x.db", "invalid URL escape"},
		{"postgres://u:S3cr3t@127.0.0.1:1/db?sslmode=bogus", "bad connection string"},
		{"postgres://127.0.0.1:1/db?password=S3cr3t&sslmode=bogus", "bad connection string"},
		{"postgres://127.0.0.1:1/db?PASSWORD=S3cr3t&connect_timeout=soon", "invalid connect_timeout"},
		{"postgres://u:S3cr3t%zz@127.0.0.1:1/db", "bad connection string"},
		{"postgres://u:S3cr3t@127.0.0.1:1/db?connect_timeout=1&sslmode=disable", "catalog: postgres"},
		{"postgres://127.0.0.1:1/db?password=S3cr3t&connect_timeout=1&sslmode=disable", "catalog: postgres"},
	} {
		_, err := drivers.Open(ctx, tc.url, nil)
		require.Error(t, err, tc.url)
		assert.Contains(t, err.Error(), tc.want, tc.url)
		assert.NotContains(t, err.Error(), "S3cr3t", tc.url)
		assert.NotContains(t, err.Error(), "\n", "one-line error")
	}
}
