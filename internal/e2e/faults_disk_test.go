package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/faults"
)

// mountSmallDisk mounts a tmpfs of size bytes at dir, unmounted at the
// end of the test; ok is false (with why) where this process may not
// mount (not root, or no CAP_SYS_ADMIN).
func mountSmallDisk(t *testing.T, dir string, size string) (why string, ok bool) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o700))
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput()
	if err != nil {
		return "cannot mount a small file system for the disk-full test: " + strings.TrimSpace(string(out)), false
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	return "", true
}

// fillDisk writes zeros to path until the file system is full.
func fillDisk(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n
		}
		require.NoError(t, err)
	}
}

// TestFaultSQLiteDiskFullStopsCleanlyAndResumes is issue 28's "SQLite on
// a full disk": one `lethe server` whose SQLite catalog is on a small
// file system (a tmpfs of 64 MiB; the storage is elsewhere), under load
// (backups expiring). The disk is filled to the last byte while
// deletions run, held full (5 s, 20 s under LETHE_FAULTS=full), then
// freed. While it is full, writes to the catalog fail and are retried;
// the replica does not exit and says why in its log. After, every
// backup is purged exactly once, the checker finds nothing lost or done
// twice, and SQLite's integrity check finds nothing wrong.
func TestFaultSQLiteDiskFullStopsCleanlyAndResumes(t *testing.T) {
	faultsParallel(t)
	var (
		backups  = pick(12, 60)
		items    = pick(200, 600)
		full     = pick(5*time.Second, 20*time.Second)
		loadTime = pick(10*time.Second, 40*time.Second)
		deadline = pick(3*time.Minute, 10*time.Minute)
	)
	e := newEnv(t, pluginFleet)
	disk := filepath.Join(filepath.Dir(e.home), "disk")
	why, ok := mountSmallDisk(t, disk, "64m")
	faultsNeed(t, !ok, why)
	dbPath := filepath.Join(disk, "lethe.db")
	e.extra = append(e.extra, "LETHE_STORE=sqlite://"+dbPath,
		"LETHE_PLUGIN_ENV="+pluginFleet+":LETHE_RECORD_FILE="+e.record)
	e.ok("plugin", "lock")
	f := newFaultRun(t, e)

	ctx, cancel := context.WithTimeout(catalog.WithActor(context.Background(), "fault-test"), deadline)
	defer cancel()
	r := f.startReplica("r1", "--workers", "2", "--poll-interval", "1s")
	waitReady(ctx, t, r)
	waitLoad := f.load("disk", backups, items, time.Second, loadTime)

	st, err := drivers.Open(ctx, "sqlite://"+dbPath, &catalog.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	for len(f.registered()) == 0 || !purgedAny(ctx, st, f.registered()) {
		f.requireAllRunning()
		require.True(t, sleepCtx(ctx, 100*time.Millisecond), "no purge before the fault")
	}
	require.True(t, strikeLater(ctx, t))
	filler := filepath.Join(disk, "filler")
	fullAt := time.Now()
	n := fillDisk(t, filler)
	t.Logf("disk full at %s (%d bytes of filler)", fullAt.Format(time.StampMilli), n)
	// A write meanwhile is refused with one line that says why, and
	// leaves nothing behind.
	res := e.run("backup", "create", "while-full", "--from", e.writeTarball("while-full", 3))
	require.NotEqual(t, 0, res.code, "%s", res)
	require.Contains(t, res.stderr, "lethe.db: the catalog's disk is full: nothing was written; writes resume once space is freed", "%s", res)
	_, err = os.Stat(filepath.Join(e.storageDir(), "backups", "while-full"))
	require.ErrorIs(t, err, os.ErrNotExist, "a refused create leaves nothing in the storage")
	// The replica says so: /readyz answers 503, naming the full disk.
	body := waitReadyz(ctx, t, r, http.StatusServiceUnavailable)
	require.Contains(t, body, `"catalog disk full"`, body)
	require.True(t, sleepCtx(ctx, full))
	f.requireAllRunning()
	require.NoError(t, os.Remove(filler))
	freedAt := time.Now()
	// And is ready again once a write goes through.
	waitReadyz(ctx, t, r, http.StatusOK)
	t.Logf("ready again %s after the disk was freed", time.Since(freedAt).Round(100*time.Millisecond))

	waitLoad()
	names := f.registered()
	require.Len(t, names, backups)
	f.waitPurged(ctx, st, names)
	done := time.Now()
	messages := f.stop()
	t.Logf("log messages: %v", messages)

	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var integrity string
	require.NoError(t, db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&integrity))
	require.Equal(t, "ok", integrity, "the catalog is intact")
	rep := f.check(ctx, db, faults.Expect{
		Backups: names, Items: f.items,
		Plugins:    []string{"test.lethe.io/a-first", "test.lethe.io/b-second"},
		StorageDir: e.storageDir(), Record: e.record,
	})
	first, ok := recovery(rep.PurgedAt, freedAt)
	require.True(t, ok, "no purge after the disk was freed")
	t.Logf("FIGURE disk-full: catalog disk full for %s, purged before %d, during %d; first purge %s after it was freed; %.2f purges/s after; all %d purged %s after",
		full, countPurgedBefore(rep.PurgedAt, fullAt), countPurgedBefore(rep.PurgedAt, freedAt)-countPurgedBefore(rep.PurgedAt, fullAt),
		first.Round(time.Millisecond), rate(rep.PurgedAt, freedAt, done), len(rep.PurgedAt), done.Sub(freedAt).Round(time.Second))
}

// waitReadyz polls the replica's /readyz until it answers code (for at
// most 30 s), and returns the body.
func waitReadyz(ctx context.Context, t *testing.T, r *replica, code int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last string
	for {
		if resp, err := http.Get("http://" + r.addr + "/readyz"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
			if resp.StatusCode == code {
				return string(b)
			}
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			t.Fatalf("%s's /readyz never answered %d; last: %s", r.name, code, last)
		}
	}
}
