package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// forgeCatalogs runs f on an env whose catalog is the home's SQLite file,
// then on one whose catalog is a fresh PostgreSQL database (when
// LETHE_TEST_POSTGRES_URL is set), with a way to read and rewrite a
// resource's stored document as anyone who can write the catalog can.
func forgeCatalogs(t *testing.T, f func(t *testing.T, e *env, forge func(name string, edit func(doc map[string]any)))) {
	edit := func(t *testing.T, query func(string, ...any) string, exec func(string, ...any)) func(string, func(map[string]any)) {
		return func(name string, change func(map[string]any)) {
			raw := query(`SELECT doc FROM resources WHERE kind = 'Backup' AND name = $1`, name)
			var doc map[string]any
			require.NoError(t, json.Unmarshal([]byte(raw), &doc))
			change(doc)
			b, err := json.Marshal(doc)
			require.NoError(t, err)
			exec(`UPDATE resources SET doc = $1, phase = $2, due_at = NULL WHERE kind = 'Backup' AND name = $3`, string(b), doc["phase"], name)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		e := newEnv(t)
		open := func() *sql.DB {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(e.home, "lethe.db")+"?_pragma=busy_timeout(10000)")
			require.NoError(t, err)
			return db
		}
		f(t, e, edit(t, func(q string, args ...any) string {
			db := open()
			defer db.Close()
			var s string
			require.NoError(t, db.QueryRow(q, args...).Scan(&s))
			return s
		}, func(q string, args ...any) {
			db := open()
			defer db.Close()
			_, err := db.Exec(q, args...)
			require.NoError(t, err)
		}))
	})
	t.Run("postgres", func(t *testing.T) {
		admin := os.Getenv("LETHE_TEST_POSTGRES_URL")
		if admin == "" {
			t.Skip("set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
		}
		store := createDatabase(t, admin)
		e := newEnv(t)
		e.extra = append(e.extra, "LETHE_STORE="+store)
		e.ok("migrate")
		ctx := context.Background()
		f(t, e, edit(t, func(q string, args ...any) string {
			conn, err := pgx.Connect(ctx, store)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var s string
			require.NoError(t, conn.QueryRow(ctx, q, args...).Scan(&s))
			return s
		}, func(q string, args ...any) {
			conn, err := pgx.Connect(ctx, store)
			require.NoError(t, err)
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, q, args...)
			require.NoError(t, err)
		}))
	})
}

// TestForgedStorageInABackupRowDeletesNothing is the attack of the second
// security review: a backup row rewritten in the catalog (phase Deleting,
// no finalizer, no items, no expected plugins) to name a storage location
// Lethe is not configured with, a key outside the backup's folder, or
// another backup's tarball, or (third review) a velero-backup.json key
// that is not the backup's own, so that `lethe server` purges it. Nothing is
// deleted: each row gets the StorageRefused condition and a
// deletion-refused audit entry, and stays Deleting; a genuine deletion
// beside them is purged by the same server.
func TestForgedStorageInABackupRowDeletesNothing(t *testing.T) {
	forgeCatalogs(t, func(t *testing.T, e *env, forge func(string, func(map[string]any))) {
		victim := filepath.Join(t.TempDir(), "victim")
		require.NoError(t, os.MkdirAll(filepath.Join(victim, "etc"), 0o750))
		require.NoError(t, os.WriteFile(filepath.Join(victim, "etc", "important"), []byte("keep me"), 0o600))
		// The key a backup named unconfigured has, in a location Lethe is
		// not configured with.
		planted := filepath.Join(victim, "backups", "unconfigured", "unconfigured.tar.gz")
		require.NoError(t, os.MkdirAll(filepath.Dir(planted), 0o750))
		require.NoError(t, os.WriteFile(planted, []byte("keep me"), 0o600))
		for _, n := range []string{"outside", "unconfigured", "foreign-key", "other-tarball", "other", "foreign-metadata", "genuine"} {
			e.create(n, 3)
		}
		inStorage := filepath.Join(e.storageDir(), "keep", "important")
		require.NoError(t, os.MkdirAll(filepath.Dir(inStorage), 0o750))
		require.NoError(t, os.WriteFile(inStorage, []byte("keep me too"), 0o600))
		e.ok("backup", "delete", "genuine", "--yes", "--async")

		deleting := func(location, key string) func(map[string]any) {
			return func(doc map[string]any) {
				doc["phase"] = "Deleting"
				doc["deletionTimestamp"] = time.Now().UTC().Format(time.RFC3339Nano)
				delete(doc, "finalizers")
				delete(doc, "deletionDueAt")
				spec := doc["spec"].(map[string]any)
				if location != "" {
					spec["storageLocation"] = location
				}
				spec["storageKey"] = key
				spec["items"] = 0
				spec["expectedPlugins"] = map[string]any{}
			}
		}
		forge("outside", deleting("file://"+victim, "etc/important"))
		forge("unconfigured", deleting("file://"+victim, "backups/unconfigured/unconfigured.tar.gz"))
		forge("foreign-key", deleting("", "keep/important"))
		forge("other-tarball", deleting("", "backups/other/other.tar.gz"))
		// Its own tarball, but a velero-backup.json key elsewhere: Velero
		// plugins would get that file as the Backup.
		forge("foreign-metadata", func(doc map[string]any) {
			deleting("", "backups/foreign-metadata/foreign-metadata.tar.gz")(doc)
			doc["spec"].(map[string]any)["velero"] = map[string]any{"metadataKey": "keep/important", "phase": "Completed"}
		})

		p := e.startLong(3*time.Minute, "server", "--no-plugins", "--sync-interval", "0", "--metrics-addr", freePort(t))
		forged := []string{"outside", "unconfigured", "foreign-key", "other-tarball", "foreign-metadata"}
		eventually(t, p, 60*time.Second, "every forged row is refused, and the genuine deletion purged", func() bool {
			for _, n := range forged {
				if !strings.HasPrefix(e.conditions(n)["StorageRefused"], "True ") {
					return false
				}
			}
			return e.run("backup", "get", "genuine").code == 4
		})
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		res := p.wait(t)
		require.Equal(t, 0, res.code, "%s", res)

		require.FileExists(t, filepath.Join(victim, "etc", "important"), "a location Lethe is not configured with, any key")
		require.FileExists(t, planted, "a location Lethe is not configured with, the backup's own key")
		require.FileExists(t, inStorage, "a key outside the backup's folder")
		require.FileExists(t, e.tarballPath("other"), "another backup's tarball")
		require.Equal(t, "Active", e.get("other").Phase)
		require.FileExists(t, e.tarballPath("foreign-metadata"), "a backup whose velero-backup.json key is not its own")
		require.Contains(t, e.conditions("foreign-metadata")["StorageRefused"], `its velero-backup.json key keep/important is not its own (backups/foreign-metadata/velero-backup.json)`)
		require.Contains(t, e.conditions("outside")["StorageRefused"], "refusing to read or delete anything for it")
		require.Contains(t, e.conditions("unconfigured")["StorageRefused"], "its storage location file://"+victim+" is not one Lethe is configured with")
		require.Contains(t, e.conditions("foreign-key")["StorageRefused"], `its storage key keep/important is not its own tarball`)
		require.Contains(t, e.conditions("other-tarball")["StorageRefused"], `its storage key backups/other/other.tar.gz is not its own tarball`)
		for _, n := range forged {
			require.Equal(t, "Deleting", e.get(n).Phase, n)
			a := e.ok("audit", "--kind", "Backup", "--name", n)
			require.Contains(t, a.stdout, "deletion-refused", "%s: %s", n, a)
			require.NotContains(t, a.stdout, "purge", "%s: %s", n, a)
		}

		// By hand, the same: one line, exit 1, nothing deleted.
		r := e.run("backup", "delete", "unconfigured", "--yes", "--no-plugins")
		requireOneErrorLine(t, r, "is not one Lethe is configured with")
		require.FileExists(t, planted)
	})
}
