package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

type locationJSON struct {
	Kind          string
	Name          string
	URL           string
	Default       bool
	ReadOnly      bool
	Phase         string
	LastError     string
	Backups       int
	LastSyncTime  *string
	LastCheckTime string
}

func (e *env) locations() map[string]locationJSON {
	e.t.Helper()
	r := e.ok("location", "list", "-o", "json")
	out := map[string]locationJSON{}
	for _, raw := range listItems(e.t, r.stdout, "LocationStatus") {
		var l locationJSON
		require.NoError(e.t, json.Unmarshal(raw, &l), "%s", r)
		out[l.Name] = l
	}
	return out
}

// TestNamedLocationsSyncEachAndRefuseDeletingFromAReadOnlyOne is issue 24
// point 1 through the binary: two named locations (LETHE_LOCATIONS, as
// the config file's location list), each synced by one `backup sync`;
// each backup records its location by name; `location list` shows each
// one's phase, backups and last sync; a backup in the read-only location
// is refused deletion with one line (exit 5) and nothing changes; a
// location that disappears is Unavailable with its error, concludes
// nothing, and the other is still synced.
func TestNamedLocationsSyncEachAndRefuseDeletingFromAReadOnlyOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginNoop)
	main, archive := filepath.Join(e.home, "main"), filepath.Join(e.home, "archive")
	for _, d := range []string{main, archive} {
		require.NoError(t, os.MkdirAll(d, 0o750))
	}
	e.extra = append(e.extra, "LETHE_LOCATIONS=primary=file://"+main+",default\narchive=file://"+archive+",readOnly")
	require.NoError(t, velerotest.WriteDir(main, velerotest.Backup("in-main")))
	require.NoError(t, velerotest.WriteDir(archive, velerotest.Backup("in-archive")))

	ls := e.locations()
	require.Equal(t, "Available", ls["primary"].Phase)
	require.True(t, ls["primary"].Default)
	require.True(t, ls["archive"].ReadOnly)
	require.Nil(t, ls["archive"].LastSyncTime, "never synced yet")

	r := e.ok("backup", "sync", "-o", "json")
	got := map[string]string{}
	for _, raw := range listItems(t, r.stdout, "SyncResult") {
		var x struct{ Name, Action, Location string }
		require.NoError(t, json.Unmarshal(raw, &x), "%s", r)
		got[x.Name] = x.Action + "@" + x.Location
	}
	require.Equal(t, map[string]string{"in-main": "imported@primary", "in-archive": "imported@archive"}, got)
	var b struct {
		Spec struct{ Location, StorageLocation string }
	}
	out := e.ok("backup", "get", "in-archive", "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &b))
	require.Equal(t, "archive", b.Spec.Location)
	require.Equal(t, "file://"+archive, b.Spec.StorageLocation)
	ls = e.locations()
	require.Equal(t, 1, ls["primary"].Backups)
	require.Equal(t, 1, ls["archive"].Backups)
	require.NotNil(t, ls["archive"].LastSyncTime)

	// Read-only: refused with one line, exit 5, nothing changed.
	before := treeDigest(t, archive)
	for _, args := range [][]string{{"--yes"}, {"--yes", "--async"}, {"--yes", "--abandon"}} {
		r := e.run(append([]string{"backup", "delete", "in-archive"}, args...)...)
		require.Equal(t, 5, r.code, "%v %s", args, r)
		requireOneErrorLine(t, r, "is in the read-only storage location")
		require.Equal(t, "Active", e.get("in-archive").Phase)
	}
	require.Equal(t, before, treeDigest(t, archive))
	e.ok("backup", "delete", "in-main", "--yes")
	e.requirePurged("in-main")

	// The archive disappears: Unavailable, nothing concluded; the primary
	// is still synced.
	require.NoError(t, os.Rename(archive, archive+".away"))
	require.NoError(t, velerotest.WriteDir(main, velerotest.Backup("later")))
	r = e.run("backup", "sync")
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stderr, "location archive")
	require.Regexp(t, `later\s+primary\s+imported`, r.stdout)
	l := e.locations()["archive"]
	require.Equal(t, "Unavailable", l.Phase)
	require.Contains(t, l.LastError, "does not exist")
	require.Empty(t, e.conditions("in-archive"), "nothing concluded from an unavailable location")

	r = e.run("location", "get", "nope")
	require.Equal(t, 4, r.code, "%s", r)
	r = e.run("location", "list", "--location", "x=file:///tmp,default", "--storage", "file:///tmp/y")
	require.Equal(t, 2, r.code, "%s", r)
	r = e.run("location", "list", "--location", "x=s3://KEY:hunter2@bucket")
	require.Equal(t, 2, r.code, "%s", r)
	require.NotContains(t, r.stderr, "hunter2")
}

// TestDeletionWaitsForAnUnavailableLocation: the server parks a deletion
// whose storage location cannot be read (condition LocationUnavailable)
// as a row of the retry queue (type Location, item location:NAME, the
// location's error as reason): no plugin runs, the backup stays Deleting,
// the row is never charged an attempt, and its rechecks, on the queue's
// backoff, do not claim the deletion's work item; once the location is
// back, the recheck (here made at once with `retry now`) resumes the
// deletion, which purges, and the row is gone.
func TestDeletionWaitsForAnUnavailableLocation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	main, far := filepath.Join(e.home, "main"), filepath.Join(e.home, "far")
	for _, d := range []string{main, far} {
		require.NoError(t, os.MkdirAll(d, 0o750))
	}
	e.extra = append(e.extra, "LETHE_LOCATIONS=main=file://"+main+",default\nfar=file://"+far)
	require.NoError(t, velerotest.WriteDir(far, velerotest.Backup("away")))
	e.ok("backup", "sync")
	e.ok("backup", "delete", "away", "--yes", "--async")
	uid := e.get("away").UID
	require.NoError(t, os.Rename(far, far+".gone"))

	e.ok("plugin", "lock")
	p := e.startLong(3*time.Minute, "server", "--sync-interval", "0", "--metrics-addr", freePort(t), "--retry-backoff", "1s")
	eventually(t, p, 60*time.Second, "the deletion is parked with LocationUnavailable", func() bool {
		return strings.HasPrefix(e.conditions("away")["LocationUnavailable"], "True ")
	})
	require.Contains(t, e.conditions("away")["LocationUnavailable"], "the folder does not exist")
	require.Equal(t, "Deleting", e.get("away").Phase)
	var row retryRowJSON
	eventually(t, p, 60*time.Second, "the deletion waits as a retry row", func() bool {
		rows := e.retryRows("--type", "Location")
		if len(rows) == 1 {
			row = rows[0]
		}
		return len(rows) == 1
	})
	require.Equal(t, "location:far", row.ItemID)
	require.Equal(t, "Backup/away", row.Key)
	require.Contains(t, row.LastError, "LocationUnavailable: ")
	require.Contains(t, row.LastError, "the folder does not exist")
	claims := e.workClaims(uid)

	// A recheck on the backoff (1s after the park): still unavailable,
	// no attempt charged, the work item not claimed again.
	eventually(t, p, 60*time.Second, "the row is rechecked", func() bool {
		rows := e.retryRows("--type", "Location")
		require.Len(t, rows, 1)
		row = rows[0]
		return len(row.History) >= 2
	})
	require.Zero(t, row.Attempts, "nothing failed, nothing charged: %+v", row)
	require.Equal(t, "retryable", row.State)
	require.Equal(t, claims, e.workClaims(uid), "the rechecks did not claim the deletion's work item")
	require.Zero(t, fileSize(e.record), "no plugin ran while the location was unavailable")

	// Back: the row's recheck resumes the deletion, and the row goes.
	require.NoError(t, os.Rename(far+".gone", far))
	e.ok("retry", "now", fmt.Sprint(row.ID))
	eventually(t, p, 60*time.Second, "the deletion resumed and purged the backup", func() bool {
		return e.run("backup", "get", "away").code == 4
	})
	e.requirePurged("away")
	require.Empty(t, e.retryRows())
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	res := p.wait(t)
	require.Equal(t, 0, res.code, "%s", res)
	require.Contains(t, res.stderr, "deletion parked: its storage location is unavailable")
	require.Contains(t, res.stderr, "deletion resumed: its storage location is back")
}

// workClaims is how many times the deletion work item of the backup uid
// was claimed (read from the catalog: SQLite lets a reader beside the
// server).
func (e *env) workClaims(uid string) int {
	e.t.Helper()
	st := e.openCatalog()
	defer st.Close()
	w, err := st.GetWork(context.Background(), deletion.Queue, uid)
	require.NoError(e.t, err)
	return w.Attempts
}

// TestLocationGetPrintsALocationStatusNotABackupStorageLocation: one kind,
// one shape. location get and list print a check made then (kind
// LocationStatus), not the catalog's BackupStorageLocation record that
// get backupstoragelocation prints; apply refuses a LocationStatus with
// one line naming the command that prints the record, exit 1, and the
// record still round-trips.
func TestLocationGetPrintsALocationStatusNotABackupStorageLocation(t *testing.T) {
	e := newEnv(t)
	e.ok("backup", "sync") // records the default location
	for _, args := range [][]string{{"location", "get", "default"}, {"location", "list"}} {
		for _, format := range []string{"yaml", "json"} {
			got := e.ok(append(args, "-o", format)...).stdout
			assert.NotRegexp(t, `kind"?: "?BackupStorageLocation`, got, "%v -o %s", args, format)
			assert.Regexp(t, `kind"?: "?LocationStatus`, got, "%v -o %s", args, format)
			r := e.runStdin(got, "apply", "-f", "-")
			require.Equal(t, 1, r.code, "%s", r)
			assert.Contains(t, r.stderr, "kind: a LocationStatus is what 'lethe location get' prints")
			assert.Contains(t, r.stderr, "'lethe get backupstoragelocation NAME -o yaml'")
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %s", r.stderr)
		}
	}
	rec := e.ok("get", "backupstoragelocation", "default", "-o", "yaml").stdout
	assert.Contains(t, rec, "kind: BackupStorageLocation")
	r := e.runStdin(rec, "apply", "-f", "-")
	require.Equal(t, 0, r.code, "%s", r)
	assert.Contains(t, r.stdout, "1 unchanged.")
}
