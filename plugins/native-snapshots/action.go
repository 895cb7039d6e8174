package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lethehq/lethe/pkg/plugin"
)

// RetryAfter is when a snapshot in use is worth retrying.
const RetryAfter = time.Minute

// CallLog is the file, in the fake cloud, that records each call.
const CallLog = "api-calls.log"

// action deletes native volume snapshots from the fake cloud.
type action struct {
	dir string
}

var _ plugin.DeleteItemAction = (*action)(nil)

// AppliesTo names the native volume snapshots literally: no other
// selector receives them.
func (a *action) AppliesTo(context.Context) (plugin.ResourceSelector, error) {
	return plugin.ResourceSelector{IncludedResources: []string{plugin.NativeVolumeSnapshotGroupResource}}, nil
}

func (a *action) Execute(ctx context.Context, in *plugin.DeleteItemActionInput) error {
	snap, err := in.Item.NativeVolumeSnapshot()
	if err != nil {
		return err
	}
	// Delete only what the backup being deleted took.
	if b := snap.Spec.BackupName; b != "" && b != in.Backup.Name {
		return plugin.Skipped(fmt.Sprintf("snapshot belongs to backup %q, not to %q; leaving it alone", b, in.Backup.Name))
	}
	id := snap.Status.ProviderSnapshotID
	if id == "" {
		return plugin.Skipped(fmt.Sprintf("no providerSnapshotID (phase %q): the snapshot was never taken", snap.Status.Phase))
	}
	if a.dir == "" {
		return errors.New("LETHE_FAKE_CLOUD_DIR is not set: cannot delete snapshots")
	}
	if !filepath.IsLocal(id) || strings.ContainsRune(id, filepath.Separator) {
		return fmt.Errorf("providerSnapshotID %q is not a plain file name in the fake cloud; refusing it", id)
	}
	root, err := os.OpenRoot(a.dir)
	if err != nil {
		return fmt.Errorf("fake cloud: %w", err)
	}
	defer root.Close()
	if err := ctx.Err(); err != nil {
		return err
	}
	result, rerr := "deleted", error(nil)
	if _, err := root.Lstat(id + ".lock"); err == nil {
		result, rerr = "in-use", plugin.Blocked(RetryAfter, fmt.Sprintf("snapshot %s is in use (%s.lock exists)", id, id))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fake cloud: %w", err)
	} else if err := root.Remove(id); errors.Is(err, fs.ErrNotExist) {
		result = "not-found" // already gone: deletion is idempotent
	} else if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := logCall(root, fmt.Sprintf("DeleteSnapshot %s %s %s\n", id, snap.Spec.Location, result)); err != nil {
		return fmt.Errorf("fake cloud: %w", err)
	}
	if rerr == nil {
		plugin.Logger(ctx).Info("deleted snapshot", "snapshot", id, "location", snap.Spec.Location,
			"volume", snap.Spec.ProviderVolumeID, "backup", in.Backup.Name, "result", result)
	}
	return rerr
}

// logCall appends one line to the fake cloud's call log; one write of a
// short line with O_APPEND does not interleave with another.
func logCall(root *os.Root, line string) error {
	f, err := root.OpenFile(CallLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
