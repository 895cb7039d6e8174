package faults

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// world is a catalog (a real SQLite one, migrated by Lethe), a storage
// folder and a fleetrec record, in which each case plants one fault.
type world struct {
	t       *testing.T
	db      *sql.DB
	storage string
	record  *os.File
	want    Expect
	ts      int64
}

func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "lethe.db")
	st, err := drivers.Open(context.Background(), "sqlite://"+path, &catalog.Config{})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	rec, err := os.Create(filepath.Join(dir, "record.txt"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rec.Close() })
	w := &world{t: t, db: db, storage: filepath.Join(dir, "storage"), record: rec, ts: 1000}
	w.want = Expect{Items: map[string]int{}, Plugins: []string{"p/a", "p/b"}, Dependents: map[string][]string{},
		StorageDir: w.storage, Record: rec.Name()}
	return w
}

func (w *world) exec(q string, args ...any) {
	w.t.Helper()
	_, err := w.db.Exec(q, args...)
	require.NoError(w.t, err)
}

func (w *world) audit(kind, name, uid, action string) {
	w.ts++
	w.exec(`INSERT INTO audit (ts, actor, action, kind, namespace, name, uid, from_phase, to_phase, reason, details)
VALUES ($1, 'test', $2, $3, '', $4, $5, '', '', '', '{}')`, w.ts, action, kind, name, uid)
}

func (w *world) tombstone(kind, name, uid string) {
	w.ts++
	w.exec(`INSERT INTO tombstones (uid, kind, namespace, name, purged_at, doc) VALUES ($1, $2, '', $3, $4, '{}')`, uid, kind, name, w.ts)
}

func (w *world) line(ev, backup, plugin, item string) {
	_, err := fmt.Fprintf(w.record, "%s\t%s\t%s\t%s\t42\n", ev, backup, plugin, item)
	require.NoError(w.t, err)
}

// purged lays out a backup done right: its items through both plugins,
// its snapshots purged first, its audit trail ending with one purge.
func (w *world) purged(name string, items int, snaps ...string) {
	uid := "uid-" + name
	w.want.Backups = append(w.want.Backups, name)
	w.want.Items[name] = items
	w.audit("Backup", name, uid, "create")
	w.audit("Backup", name, uid, "schedule")
	for i := range items {
		for _, p := range w.want.Plugins {
			w.line("S", name, p, fmt.Sprintf("pods/ns/item-%d", i))
			w.line("E", name, p, fmt.Sprintf("pods/ns/item-%d", i))
		}
	}
	for _, s := range snaps {
		w.tombstone("VolumeSnapshot", s, "uid-"+s)
		w.want.Dependents[name] = append(w.want.Dependents[name], s)
	}
	w.tombstone("Backup", name, uid)
	w.audit("Backup", name, uid, "purge")
}

func (w *world) check() []string {
	w.t.Helper()
	rep, err := Check(context.Background(), w.db, w.want)
	require.NoError(w.t, err)
	return rep.Violations
}

func TestCheckerPassesARunThatLostAndRepeatedNothing(t *testing.T) {
	w := newWorld(t)
	w.purged("a", 3, "snap-1", "snap-2")
	w.purged("b", 2)
	w.line("S", "b", "p/a", "pods/ns/item-0") // a redelivery, finished
	w.line("C", "b", "p/a", "pods/ns/item-0") // ... or crashed on
	w.line("S", "b", "p/a", "pods/ns/item-0")
	w.line("E", "b", "p/a", "pods/ns/item-0")
	require.NoError(t, os.MkdirAll(filepath.Join(w.storage, "backups", "other"), 0o750))
	require.Empty(t, w.check())
}

// TestCheckerFindsEachBrokenInvariant plants one fault per case; the
// checker must name it.
func TestCheckerFindsEachBrokenInvariant(t *testing.T) {
	for _, c := range []struct {
		name  string
		plant func(w *world)
		want  string
	}{
		{"purged twice", func(w *world) { w.audit("Backup", "a", "uid-a", "purge") }, "2 purges in the audit log"},
		{"force-purged too", func(w *world) { w.audit("Backup", "a", "uid-a", "force-purge") }, "2 purges in the audit log"},
		{"never purged", func(w *world) {
			w.want.Backups = append(w.want.Backups, "c")
			w.want.Items["c"] = 0
		}, "backup c has no tombstone"},
		{"still in the catalog", func(w *world) {
			w.exec(`INSERT INTO resources (uid, kind, namespace, name, phase, resource_version, doc) VALUES ('uid-a2', 'Backup', '', 'a', 'Active', 1, '{}')`)
		}, "backup a is still in the catalog"},
		{"audit goes on after the purge", func(w *world) { w.audit("Backup", "a", "uid-a", "update") }, "goes on after its purge"},
		{"audit out of order", func(w *world) {
			w.ts += 100
			w.audit("Backup", "d", "uid-d", "create")
			w.ts -= 50
			w.purged("d", 0)
			w.want.Items["d"] = 0
		}, "backup d: audit entry 5 (create by test) is dated before the entry before it (4, create by test)"},
		{"an item missed a plugin", func(w *world) {
			w.line("S", "a", "p/b", "pods/ns/item-3")
			w.line("E", "a", "p/b", "pods/ns/item-3")
			w.want.Items["a"] = 4
		}, "backup a: 3 of its 4 items reached plugin p/a"},
		{"a plugin call unfinished", func(w *world) { w.line("S", "a", "p/b", "pods/ns/item-9") }, "started and never finished: a p/b pods/ns/item-9"},
		{"a dependent never purged", func(w *world) { w.want.Dependents["a"] = append(w.want.Dependents["a"], "snap-9") }, "dependent snap-9 of backup a was not purged"},
		{"a block reference bypassed", func(w *world) {
			w.tombstone("VolumeSnapshot", "snap-late", "uid-snap-late")
			w.want.Dependents["a"] = append(w.want.Dependents["a"], "snap-late")
		}, "snap-late was purged after its owner a"},
		{"tarball left in storage", func(w *world) {
			require.NoError(t, os.MkdirAll(filepath.Join(w.storage, "backups", "a"), 0o750))
		}, "backup a is purged but"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			w.purged("a", 3, "snap-1")
			c.plant(w)
			v := w.check()
			require.Len(t, v, 1, "%v", v)
			require.Contains(t, v[0], c.want)
			require.True(t, strings.HasPrefix(v[0], "backup") || strings.HasPrefix(v[0], "dependent") || strings.HasPrefix(v[0], "a plugin"), v[0])
		})
	}
}

// TestCheckerToleratesAuditSkewUpToTheBoundOnly: with AuditSkew set, an
// entry dated earlier than the one before it by less passes and is
// measured; by more, it is a violation.
func TestCheckerToleratesAuditSkewUpToTheBoundOnly(t *testing.T) {
	w := newWorld(t)
	w.ts += 100
	w.audit("Backup", "d", "uid-d", "create")
	w.ts -= 50 // the next entry is dated 49 ns before it
	w.purged("d", 0)
	w.want.AuditSkew = 49
	rep, err := Check(context.Background(), w.db, w.want)
	require.NoError(t, err)
	require.Empty(t, rep.Violations)
	require.Equal(t, time.Duration(49), rep.MaxAuditSkew)
	w.want.AuditSkew = 48
	require.Len(t, w.check(), 1)
}
