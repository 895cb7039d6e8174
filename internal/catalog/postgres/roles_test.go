package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
	"github.com/lethehq/lethe/internal/catalog/postgres"
)

// rolesScript is the documented least-privilege setup, run as it is.
const rolesScript = "../../../docs/postgres-roles.sql"

// roleSetup is docs/postgres-roles.sql with its own database and roles.
type roleSetup struct {
	steps            map[string]string // "1", "2", "4" → SQL with the names replaced
	owner, app, db   string
	ownerURL, appURL string
}

var wordLethe = regexp.MustCompile(`\blethe\b`)

// script returns step n of the setup script, for schema (the database's
// name in step 1).
func (rs *roleSetup) script(n, schema string) string {
	s := rs.steps[n]
	s = strings.ReplaceAll(s, "lethe_owner", rs.owner)
	s = strings.ReplaceAll(s, "lethe_app", rs.app)
	if n == "1" {
		return wordLethe.ReplaceAllString(s, rs.db)
	}
	return wordLethe.ReplaceAllString(s, schema)
}

// newRoleSetup reads the script, runs its step 1 with a database and two
// roles of the test's own (dropped when t ends), and step 2 for a schema
// named like the database.
func newRoleSetup(t *testing.T) *roleSetup {
	t.Helper()
	admin := testURL(t)
	b, err := os.ReadFile(rolesScript)
	require.NoError(t, err)
	rs := &roleSetup{steps: map[string]string{}}
	step := ""
	for _, line := range strings.Split(string(b), "\n") {
		if m := regexp.MustCompile(`^-- step (\d):`).FindStringSubmatch(line); m != nil {
			step = m[1]
			continue
		}
		if step != "" && !strings.HasPrefix(line, "--") {
			rs.steps[step] += line + "\n"
		}
	}
	require.Contains(t, rs.steps, "1")
	require.Contains(t, rs.steps, "2")
	require.Contains(t, rs.steps, "4")

	sfx := make([]byte, 5)
	_, _ = rand.Read(sfx)
	id := hex.EncodeToString(sfx)
	rs.owner, rs.app, rs.db = "lethe_owner_"+id, "lethe_app_"+id, "lethe_roles_"+id
	ctx := context.Background()
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		require.NoError(t, err)
		defer conn.Close(ctx)
		for _, sql := range []string{
			`DROP DATABASE IF EXISTS ` + pgx.Identifier{rs.db}.Sanitize() + ` WITH (FORCE)`,
			`DROP ROLE IF EXISTS ` + pgx.Identifier{rs.app}.Sanitize(),
			`DROP ROLE IF EXISTS ` + pgx.Identifier{rs.owner}.Sanitize(),
		} {
			_, err := conn.Exec(ctx, sql)
			require.NoError(t, err, sql)
		}
	})
	execScript(t, admin, rs.script("1", rs.db))
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + rs.db
	u.User = url.User(rs.owner)
	rs.ownerURL = u.String()
	u.User = url.User(rs.app)
	rs.appURL = u.String()
	execScript(t, rs.ownerURL, rs.script("2", rs.db))
	return rs
}

// setupMu serializes the role script's steps across parallel subtests.
var setupMu sync.Mutex

// execScript runs the statements of sql one by one (CREATE DATABASE may
// not run in the implicit transaction of a multi-statement string).
func execScript(t *testing.T, connURL, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, connURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, stmt := range strings.Split(sql, ";\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		_, err := conn.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
}

// migrate migrates schema as the owner (step 3) and grants (step 4).
func (rs *roleSetup) migrate(t *testing.T, schema string) {
	t.Helper()
	s, err := postgres.Open(context.Background(), rs.ownerURL, &catalog.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	execScript(t, rs.ownerURL, rs.script("4", schema))
}

// TestLeastPrivilegeRoles is issue 9 point 5: with the documented setup,
// Lethe runs as the runtime role (the whole conformance suite passes),
// while that role can neither rewrite the audit log nor remove its
// triggers, and the owner cannot TRUNCATE it either.
func TestLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRoleSetup(t)
	rs.migrate(t, rs.db)

	t.Run("conformance as the runtime role", func(t *testing.T) {
		catalogtest.Run(t, func(t testing.TB, cfg *catalog.Config) catalog.Store {
			t.Helper()
			// A schema per subtest, owned and migrated by the owner.
			b := make([]byte, 4)
			_, _ = rand.Read(b)
			schema := rs.db + "_" + hex.EncodeToString(b)
			tt := t.(*testing.T)
			// Subtests run in parallel, and the script's GRANT/REVOKE on
			// the shared database's objects ("tuple concurrently
			// updated") must not: one setup at a time.
			setupMu.Lock()
			execScript(tt, rs.ownerURL, rs.script("2", schema))
			rs.migrate(tt, schema)
			setupMu.Unlock()
			var c catalog.Config
			if cfg != nil {
				c = *cfg
			}
			c.Schema = schema
			c.PollInterval = time.Hour
			s, err := postgres.Open(ctx, rs.appURL, &c)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			return s
		})
	})

	// The runtime role writes and reads the audit log through Lethe.
	s, err := postgres.Open(ctx, rs.appURL, nil)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Create(ctx, &catalog.Resource{Kind: "Backup", Name: "b"})
	require.NoError(t, err)
	require.NoError(t, s.AppendAudit(ctx, catalog.AuditEntry{Actor: "a", Action: "x", Kind: "K", Name: "n"}))
	entries, err := s.ListAudit(ctx, catalog.AuditFilter{})
	require.NoError(t, err)
	require.Len(t, entries, 2)

	app, err := pgx.Connect(ctx, rs.appURL)
	require.NoError(t, err)
	defer app.Close(ctx)
	for _, sql := range []string{
		`TRUNCATE audit`,
		`DELETE FROM audit`,
		`UPDATE audit SET actor = 'mallory'`,
		`DROP TRIGGER audit_no_truncate ON audit`,
		`DROP TRIGGER audit_append_only ON audit`,
		`ALTER TABLE audit DISABLE TRIGGER ALL`,
		`DROP TABLE audit`,
		`SET session_replication_role = replica`,
		`TRUNCATE resources`,
		`CREATE TABLE evil (x int)`,
		`DELETE FROM lethe_migrations`,
	} {
		_, err := app.Exec(ctx, sql)
		require.Error(t, err, "the runtime role ran %q", sql)
		require.Contains(t, err.Error(), "SQLSTATE 42501", "%q: %v", sql, err) // insufficient_privilege
	}
	var n int
	require.NoError(t, app.QueryRow(ctx, `SELECT count(*) FROM audit`).Scan(&n))
	require.Equal(t, 2, n, "the audit log is intact")

	// Even the owner cannot TRUNCATE the audit log: the trigger refuses.
	owner, err := pgx.Connect(ctx, rs.ownerURL)
	require.NoError(t, err)
	defer owner.Close(ctx)
	_, err = owner.Exec(ctx, `TRUNCATE audit`)
	require.ErrorContains(t, err, "append-only")
}

// TestRuntimeRoleCannotMigrate: a runtime role that meets a schema behind
// the binary says to run `lethe migrate` as the owner.
func TestRuntimeRoleCannotMigrate(t *testing.T) {
	t.Parallel()
	rs := newRoleSetup(t)
	_, err := postgres.Open(context.Background(), rs.appURL, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "run 'lethe migrate' as the role that owns the catalog")
	require.NotContains(t, err.Error(), "\n")
}
