package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// TestFailedItemKeepsBackup is issue 2 point 7 and DESIGN §7.1: an item a
// plugin fails keeps the backup and its tarball, with the item visible;
// a rerun after the cause is fixed sends only that item, then purges.
func TestFailedItemKeepsBackup(t *testing.T) {
	t.Parallel()
	const name, n = "keep", 30
	e := newEnv(t, pluginRecorder)
	e.create(name, n)
	bad := archivetest.SpecN(14, 200) // a pod, so all three plugins want it
	require.Equal(t, "pods", bad.Resource)
	failFile := filepath.Join(e.control, bad.Name+".fail")
	require.NoError(t, os.WriteFile(failFile, nil, 0o600))

	r := e.run("backup", "delete", name, "--yes")
	require.Equal(t, 3, r.code, "exit 3: items failed or blocked\n%s", r)
	require.Contains(t, r.stdout, "backup "+name+" NOT deleted: 1 of 30 items")
	require.Contains(t, r.stdout, bad.Key())

	requireKept := func(attempts int) {
		t.Helper()
		b := e.get(name)
		require.Equal(t, "Deleting", b.Phase)
		require.Len(t, b.Unsettled, 1, "%+v", b.Unsettled)
		u := b.Unsettled[0]
		require.Equal(t, bad.Key(), u.ItemKey)
		require.Equal(t, recFirst, u.Plugin)
		require.Equal(t, "failed", u.Outcome)
		require.Contains(t, u.Message, "injected failure for "+bad.Name)
		require.Equal(t, attempts, u.Attempts)
		require.NotNil(t, b.Progress)
		require.EqualValues(t, 1, b.Progress.Counts[recFirst].Failed)
		require.FileExists(t, e.tarballPath(name), "the tarball must stay while an item is unsettled")
		list := e.list()
		require.Len(t, list, 1)
		require.Equal(t, "Deleting", list[0].Phase)
		table := e.ok("backup", "get", name)
		require.Contains(t, table.stdout, "failed  "+bad.Key())
	}
	requireKept(1)

	// Every other item went through the plugins it matches; the failed one
	// went nowhere after a-first (later plugins do not run for it).
	rec := e.readRecord()
	for i := range n {
		s := archivetest.SpecN(i, 200)
		want := 1
		if s.Key() == bad.Key() {
			want = 0
		}
		require.Equal(t, want, rec[recFirst][s.Key()], s.Key())
		require.Equal(t, want, rec[recSecond][s.Key()], s.Key())
	}
	require.Zero(t, rec[recPods][bad.Key()])

	// Still failing: the rerun sends only that item, and keeps everything.
	size := fileSize(e.record)
	r = e.run("backup", "delete", name, "--yes")
	require.Equal(t, 3, r.code, "%s", r)
	require.Equal(t, size, fileSize(e.record), "a rerun sent settled items again")
	requireKept(2)

	// The cause is gone: the rerun sends only that item, through every
	// matching plugin in order, and purges.
	require.NoError(t, os.Remove(failFile))
	r = e.ok("backup", "delete", name, "--yes")
	require.Contains(t, r.stdout, "backup "+name+" deleted")
	require.Equal(t, []string{
		recFirst + "\t" + bad.Key(),
		recSecond + "\t" + bad.Key(),
		recPods + "\t" + bad.Key(),
	}, readLinesFrom(t, e.record, size))
	e.requirePurged(name)
}

// TestGraceWindow is issue 5 point 6 and DESIGN §7.4: with a deletion
// delay, delete only schedules; list shows the time left; every new
// process sees the same; undelete returns the backup to Active; --force
// deletes at once.
func TestGraceWindow(t *testing.T) {
	t.Parallel()
	const name, n = "grace", 20
	e := newEnv(t, pluginRecorder)
	e.create(name, n, "--deletion-delay", "1h")

	requireScheduled := func() {
		t.Helper()
		b := e.get(name)
		require.Equal(t, "Scheduled", b.Phase)
		require.NotNil(t, b.DueAt)
		left := time.Until(*b.DueAt)
		require.True(t, left > 50*time.Minute && left <= time.Hour, "due in %v, want about 1h", left)
		table := e.ok("backup", "list")
		require.Regexp(t, `(?m)^grace\s+Scheduled \((59m\d\ds|1h00m) left\)\s`, table.stdout)
		require.FileExists(t, e.tarballPath(name))
		require.Zero(t, fileSize(e.record), "no plugin runs while the deletion is scheduled")
	}

	r := e.ok("backup", "delete", name, "--yes")
	require.Contains(t, r.stdout, "backup "+name+": deletion scheduled for ")
	require.Contains(t, r.stdout, "lethe backup undelete "+name)
	requireScheduled()
	// A new process (a "restart") sees the same window; deleting again
	// neither runs it nor moves it.
	due := *e.get(name).DueAt
	r = e.ok("backup", "delete", name, "--yes")
	require.Contains(t, r.stdout, "deletion scheduled for ")
	requireScheduled()
	require.True(t, due.Equal(*e.get(name).DueAt), "a second delete moved the due time")

	r = e.ok("backup", "undelete", name)
	require.Contains(t, r.stdout, "it is Active again")
	b := e.get(name)
	require.Equal(t, "Active", b.Phase)
	require.Nil(t, b.DueAt)
	r = e.run("backup", "undelete", name)
	require.Equal(t, 2, r.code, "%s", r)
	requireOneErrorLine(t, r, "Backup/grace has no deletion scheduled")

	// Scheduled again, then --force: deleted now.
	e.ok("backup", "delete", name, "--yes")
	requireScheduled()
	r = e.ok("backup", "delete", name, "--yes", "--force")
	require.Contains(t, r.stdout, "backup "+name+" deleted: 20 items")
	rec := e.readRecord()
	require.Len(t, rec[recFirst], n)
	require.Len(t, rec[recSecond], n)
	e.requirePurged(name)
	r = e.run("backup", "undelete", name)
	require.Equal(t, 4, r.code, "%s", r)
	requireOneErrorLine(t, r, `backup "`+name+`" was purged at `)
}

// syncRow is one line of `backup sync -o json`.
type syncRow struct {
	Name   string `json:"name"`
	Action string `json:"action"`
	Reason string `json:"reason"`
	Items  int64  `json:"items"`
}

// TestSync is issue 5 point 8 and DESIGN §6's sync filter.
func TestSync(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginNoop)
	put := func(name, from string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(e.tarballPath(name)), 0o750))
		copyFile(t, from, e.tarballPath(name), 0o640)
	}
	// sync runs backup sync and requires exit code want: 3 while a folder
	// is rejected (the others are still synced), 0 for a dry run.
	sync := func(want int, args ...string) map[string]syncRow {
		t.Helper()
		r := e.run(append([]string{"backup", "sync", "-o", "json"}, args...)...)
		require.Equal(t, want, r.code, "%s", r)
		var rows []syncRow
		for _, it := range listItems(t, r.stdout, "SyncResult") {
			var row syncRow
			require.NoError(t, json.Unmarshal(it, &row), "%s", r)
			rows = append(rows, row)
		}
		m := map[string]syncRow{}
		for _, row := range rows {
			m[row.Name] = row
		}
		require.Len(t, m, len(rows), "a tarball reported twice: %+v", rows)
		return m
	}
	names := func() []string {
		var out []string
		for _, b := range e.list() {
			out = append(out, b.Name)
		}
		return out
	}

	// A purged backup whose tarball comes back, and a scheduled one.
	e.create("gone", 5)
	gone := e.writeTarball("gone", 5)
	e.ok("backup", "delete", "gone", "--yes")
	e.requirePurged("gone")
	put("gone", gone)
	e.create("later", 5, "--deletion-delay", "1h")
	e.ok("backup", "delete", "later", "--yes")
	// New tarballs put straight into storage: a good one and a hostile one.
	put("found", e.writeTarball("found", 12))
	put("evil", e.writeHostile("evil"))

	listBefore := e.ok("backup", "list", "-o", "json").stdout
	storeBefore := treeDigest(t, e.storageDir())
	dry := sync(0, "--dry-run")
	require.Equal(t, "would-import", dry["found"].Action, "%+v", dry)
	require.EqualValues(t, 12, dry["found"].Items)
	require.Equal(t, listBefore, e.ok("backup", "list", "-o", "json").stdout, "--dry-run changed the catalog")
	require.Equal(t, storeBefore, treeDigest(t, e.storageDir()), "--dry-run changed the storage")

	got := sync(3)
	require.Equal(t, syncRow{Name: "found", Action: "imported", Items: 12}, got["found"])
	require.Equal(t, "skipped", got["gone"].Action, "a purged backup must never be re-imported: %+v", got["gone"])
	require.Contains(t, got["gone"].Reason, "purged")
	require.Equal(t, "skipped", got["later"].Action, "%+v", got["later"])
	require.Contains(t, got["later"].Reason, "Scheduled")
	require.Equal(t, "rejected", got["evil"].Action, "%+v", got["evil"])
	require.Contains(t, got["evil"].Reason, "evil.json", "the reason names the entry")
	require.ElementsMatch(t, []string{"found", "later"}, names())
	require.Equal(t, "Scheduled", e.get("later").Phase)
	b := e.get("found")
	require.Equal(t, "Active", b.Phase)
	require.EqualValues(t, 12, b.Spec.Items)
	r := e.run("backup", "get", "gone")
	require.Equal(t, 4, r.code)
	requireOneErrorLine(t, r, "was purged")

	// Sync again: nothing new, nothing duplicated.
	again := sync(3)
	require.Equal(t, "skipped", again["found"].Action)
	require.Equal(t, "skipped", again["later"].Action)
	require.Equal(t, "skipped", again["gone"].Action)
	require.ElementsMatch(t, []string{"found", "later"}, names())

	// An imported backup deletes like any other.
	e.ok("backup", "delete", "found", "--yes")
	e.requirePurged("found")
	require.Equal(t, "skipped", sync(3)["gone"].Action)
}

func readLinesFrom(t *testing.T, path string, offset int64) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.LessOrEqual(t, offset, int64(len(b)))
	s := strings.TrimSuffix(string(b[offset:]), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
