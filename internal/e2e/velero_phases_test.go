package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// writeVeleroBackup writes the files Velero 1.18 stores for the backup
// name into the file storage, its velero-backup.json saying phase.
func (e *env) writeVeleroBackup(name, phase string) {
	e.t.Helper()
	files := velerotest.Backup(name)
	e.writeVeleroPhase(name, phase)
	delete(files, velero.MetadataKey(name))
	require.NoError(e.t, velerotest.WriteDir(e.storageDir(), files))
}

// writeVeleroPhase rewrites the backup's velero-backup.json with phase,
// as Velero does when the backup moves on.
func (e *env) writeVeleroPhase(name, phase string) {
	e.t.Helper()
	obj := velerotest.BackupObject(name)
	obj["status"].(map[string]any)["phase"] = phase
	data, err := json.Marshal(obj)
	require.NoError(e.t, err)
	p := filepath.Join(e.storageDir(), filepath.FromSlash(velero.MetadataKey(name)))
	require.NoError(e.t, os.MkdirAll(filepath.Dir(p), 0o750))
	require.NoError(e.t, os.WriteFile(p, data, 0o640))
}

// syncAction is the action `backup sync -o json` reports for name.
func (e *env) syncResult(name string) (action, reason, warning string) {
	e.t.Helper()
	r := e.run("backup", "sync", "-o", "json")
	var list struct {
		Items []struct{ Name, Action, Reason, Warning string }
	}
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &list), "%s", r)
	results := list.Items
	for _, res := range results {
		if res.Name == name {
			return res.Action, res.Reason, res.Warning
		}
	}
	e.t.Fatalf("sync reported nothing of %s: %s", name, r)
	return "", "", ""
}

// TestUnfinishedVeleroBackupIsNeverDeleted is issue 24 point 3 through
// the binary: a backup whose velero-backup.json says Velero is still
// writing it is imported, but `backup delete` refuses it with one line
// (exit 5) and changes nothing; every sync reads its phase again, and
// once Velero has finished it, it is deleted. A velero-backup.json that
// cannot be read at a sync leaves the recorded phase as it was: unknown
// is not absent, and not finished either.
func TestUnfinishedVeleroBackupIsNeverDeleted(t *testing.T) {
	e := newEnv(t, pluginNoop)
	for _, phase := range []string{"New", "InProgress", "WaitingForPluginOperations", "WaitingForPluginOperationsPartiallyFailed", "Finalizing", "FinalizingPartiallyFailed"} {
		name := "b-" + strings.ToLower(phase)
		e.writeVeleroBackup(name, phase)
	}
	for _, phase := range []string{"Completed", "PartiallyFailed", "Failed", "FailedValidation"} {
		e.writeVeleroBackup("done-"+strings.ToLower(phase), phase)
	}
	e.ok("backup", "sync")
	before := treeDigest(t, e.storageDir())
	for _, phase := range []string{"New", "InProgress", "WaitingForPluginOperations", "WaitingForPluginOperationsPartiallyFailed", "Finalizing", "FinalizingPartiallyFailed"} {
		name := "b-" + strings.ToLower(phase)
		for _, args := range [][]string{{"--yes"}, {"--yes", "--force"}, {"--yes", "--wait=false"}, {"--yes", "--abandon"}} {
			r := e.run(append([]string{"backup", "delete", name}, args...)...)
			require.Equal(t, 5, r.code, "%v %s", args, r)
			requireOneErrorLine(t, r, "still being written by Velero (phase "+phase+")")
			require.Equal(t, "Active", e.get(name).Phase)
		}
		// The plan says so, as it says of any refusal (and exits 0).
		r := e.ok("backup", "delete", name, "--dry-run")
		require.Contains(t, r.stdout, "REJECTED:  backup "+name+" is still being written by Velero (phase "+phase+")")
	}
	require.Equal(t, before, treeDigest(t, e.storageDir()), "a refused deletion changes nothing")
	for _, phase := range []string{"Completed", "PartiallyFailed", "Failed", "FailedValidation"} {
		e.ok("backup", "delete", "done-"+strings.ToLower(phase), "--yes")
		e.requirePurged("done-" + strings.ToLower(phase))
	}

	// Unknown is not absent: a velero-backup.json that cannot be read
	// leaves the phase recorded as it was.
	name := "b-finalizing"
	p := filepath.Join(e.storageDir(), filepath.FromSlash(velero.MetadataKey(name)))
	require.NoError(t, os.WriteFile(p, []byte(`{"apiVersion": "velero.io/v1", "kind": "Backup", "status": {"phase": "Com`), 0o640))
	action, _, warning := e.syncResult(name)
	require.Equal(t, "skipped", action)
	require.Contains(t, warning, "the phase recorded stays Finalizing")
	require.Equal(t, 5, e.run("backup", "delete", name, "--yes").code)

	// Velero finishes it: the next sync records the phase, and it goes.
	e.writeVeleroPhase(name, "PartiallyFailed")
	action, reason, _ := e.syncResult(name)
	require.Equal(t, "updated", action)
	require.Equal(t, "Velero phase PartiallyFailed, was Finalizing", reason)
	e.ok("backup", "delete", name, "--yes")
	e.requirePurged(name)
}

// TestSelectionLeavesOutUnfinishedVeleroBackups: `backup delete -l` and
// `--all` leave out, each with a line on stderr, a backup Velero is still
// writing, and delete the others (as Velero's own --all and --selector,
// whose request for that backup alone is refused); a NAME list that
// includes it is refused whole (exit 5, one line that names it once).
func TestSelectionLeavesOutUnfinishedVeleroBackups(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginNoop)
	e.writeVeleroBackup("writing", "InProgress")
	e.writeVeleroBackup("done-a", "Completed")
	e.writeVeleroBackup("done-b", "Completed")
	e.ok("backup", "sync")

	r := e.run("backup", "delete", "writing", "done-a", "--yes")
	require.Equal(t, 5, r.code, "%s", r)
	requireOneErrorLine(t, r, "Error: backup writing is still being written by Velero (phase InProgress)")
	require.Equal(t, "Active", e.get("done-a").Phase)

	const leftOut = "left out backup writing: still being written by Velero (phase InProgress)"
	r = e.ok("backup", "delete", "-l", "app=shop", "--dry-run")
	require.Contains(t, r.stderr, leftOut)
	require.NotContains(t, r.stdout, "backup writing")
	r = e.ok("backup", "delete", "-l", "app=shop", "--yes")
	require.Contains(t, r.stderr, leftOut)
	e.requirePurged("done-a")
	e.requirePurged("done-b")
	r = e.ok("backup", "delete", "--all", "--confirm")
	require.Contains(t, r.stderr, leftOut)
	require.Contains(t, r.stderr, "No backup matches; nothing deleted.")
	require.Equal(t, "Active", e.get("writing").Phase)
	require.FileExists(t, filepath.Join(e.storageDir(), filepath.FromSlash(velero.MetadataKey("writing"))))
}
