package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/velero/velerotest"
)

func backupNames(t *testing.T, home string) []string {
	t.Helper()
	code, out, stderr := run(t, home, false, "", "backup", "list", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, "BackupList", list.Kind)
	var names []string
	for _, v := range list.Items {
		require.Equal(t, "Backup", v.Kind)
		names = append(names, v.Metadata.Name)
	}
	return names
}

// TestDeleteHabitsOfVeleroUsers is issue 14 point 5: several NAMEs,
// -l/--selector and --all, each with one plan and one confirmation, and
// --confirm as --yes; bad combinations are usage errors that change
// nothing.
func TestDeleteHabitsOfVeleroUsers(t *testing.T) {
	home, tarball := newHome(t)
	for _, b := range []struct{ name, label string }{{"a1", "team=db"}, {"a2", "team=db"}, {"a3", "team=web"}, {"a4", "team=web"}, {"a5", "team=ops"}} {
		code, _, stderr := run(t, home, false, "", "backup", "create", b.name, "--from", tarball, "--labels", b.label)
		require.Equal(t, 0, code, stderr)
	}

	// Usage errors, nothing changes.
	for _, args := range [][]string{
		{"backup", "delete", "--no-plugins", "--yes"},
		{"backup", "delete", "a1", "--all", "--no-plugins", "--yes"},
		{"backup", "delete", "-l", "team=db", "--all", "--no-plugins", "--yes"},
		{"backup", "delete", "a1", "Bad_Name", "--no-plugins", "--yes"},
		{"backup", "delete", "--all", "--abandon", "--yes"},
	} {
		code, _, stderr := run(t, home, false, "", args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		require.Equal(t, 1, strings.Count(stderr, "Error:"), "one error line: %q", stderr)
		require.True(t, strings.HasPrefix(stderr, "Error: "), stderr)
	}
	// A missing name refuses the whole request.
	code, _, _ := run(t, home, false, "", "backup", "delete", "a1", "nope", "--no-plugins", "--yes")
	require.Equal(t, exitNotFound, code)
	require.Len(t, backupNames(t, home), 5)

	// Several names: one plan, one question; "n" changes nothing.
	code, _, stderr := run(t, home, true, "n\n", "backup", "delete", "a1", "a3", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1, strings.Count(stderr, "[y/N]"), stderr)
	require.Contains(t, stderr, "Delete 2 backups (a1, a3; 24 items in all)?")
	require.Len(t, backupNames(t, home), 5)

	// A dry run of a selector plans every match, as JSON with kinds.
	code, out, stderr := run(t, home, false, "", "backup", "delete", "-l", "team=db", "--dry-run", "--no-plugins", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var plans struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &plans))
	require.Equal(t, "DeletionPlanList", plans.Kind)
	require.Len(t, plans.Items, 2)
	require.Equal(t, "DeletionPlan", plans.Items[0]["kind"])
	require.Equal(t, "a1", plans.Items[0]["backup"])

	// Several names, answered "y": both deleted.
	code, out, stderr = run(t, home, true, "y\n", "backup", "delete", "a1", "a3", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "backup a1 deleted")
	require.Contains(t, out, "backup a3 deleted")
	require.Equal(t, []string{"a2", "a4", "a5"}, backupNames(t, home))

	// A selector, with --confirm (Velero's --yes), as JSON reports.
	code, out, stderr = run(t, home, false, "", "backup", "delete", "--selector", "team=db", "--confirm", "--no-plugins", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var reps struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &reps))
	require.Len(t, reps.Items, 1)
	require.Equal(t, "DeletionReport", reps.Items[0]["kind"])
	require.Equal(t, "a2", reps.Items[0]["backup"])
	require.Equal(t, "purged", reps.Items[0]["result"])
	require.NotContains(t, out, "DueAt", "camelCase, no Go field names")
	require.NotContains(t, out, "0001-01-01", "no zero times")
	require.Equal(t, []string{"a4", "a5"}, backupNames(t, home))

	// A selector that matches nothing: nothing to do.
	code, _, stderr = run(t, home, false, "", "backup", "delete", "-l", "team=none", "--yes", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "No backup matches")

	// --all, without a terminal, needs --yes or --confirm.
	code, _, stderr = run(t, home, false, "", "backup", "delete", "--all", "--no-plugins")
	require.Equal(t, exitUsage, code, stderr)
	require.Len(t, backupNames(t, home), 2)
	code, _, stderr = run(t, home, false, "", "backup", "delete", "--all", "--confirm", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	require.Empty(t, backupNames(t, home))
}

// TestSingleDeleteJSONIsCamelCase: `backup delete NAME -o json` prints one
// DeletionReport in camelCase, without zero times.
func TestSingleDeleteJSONIsCamelCase(t *testing.T) {
	home, tarball := newHome(t)
	code, _, stderr := run(t, home, false, "", "backup", "create", "b1", "--from", tarball)
	require.Equal(t, 0, code, stderr)
	code, out, stderr := run(t, home, false, "", "backup", "delete", "b1", "--yes", "--no-plugins", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var rep map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, "DeletionReport", rep["kind"])
	require.Equal(t, "b1", rep["backup"])
	require.Equal(t, "purged", rep["result"])
	require.EqualValues(t, 12, rep["totalItems"])
	require.NotContains(t, rep, "dueAt")
	require.NotContains(t, out, "TotalItems")
}

// TestVersionAndDescribe: `lethe --version` works, and `backup describe` is
// `backup get`.
func TestVersionAndDescribe(t *testing.T) {
	home, tarball := newHome(t)
	code, out, stderr := run(t, home, false, "", "--version")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "lethe "+Version)
	code, _, stderr = run(t, home, false, "", "backup", "create", "b1", "--from", tarball)
	require.Equal(t, 0, code, stderr)
	code, out, stderr = run(t, home, false, "", "backup", "describe", "b1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "Name:       b1")
}

// TestSyncFromAVeleroBucket: `backup sync` on a Velero bucket shows
// Velero's creation time, TTL and labels in list and describe.
func TestSyncFromAVeleroBucket(t *testing.T) {
	home, _ := newHome(t)
	bucket := filepath.Join(t.TempDir(), "bucket")
	files := velerotest.Backup("nightly-0412")
	require.NoError(t, velerotest.WriteDir(bucket, files))
	code, out, stderr := run(t, home, false, "", "--storage", "file://"+bucket, "backup", "sync", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"kind": "SyncResult"`)
	require.Contains(t, out, `"action": "imported"`)
	code, out, stderr = run(t, home, false, "", "--storage", "file://"+bucket, "backup", "describe", "nightly-0412")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "Velero:     phase Completed, storage location default, namespaces shop")
	require.Contains(t, out, "TTL 720h0m0s")
	require.Contains(t, out, "app=shop")
	require.Contains(t, out, "Created:    "+velerotest.Created.Local().Format("2006-01-02T15:04:05Z07:00"))
	code, out, stderr = run(t, home, false, "", "--storage", "file://"+bucket, "backup", "delete", "nightly-0412", "--yes", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "velero-backup.json")
	require.NoDirExists(t, filepath.Join(bucket, "backups", "nightly-0412"), "the backup's whole folder is gone")
}
