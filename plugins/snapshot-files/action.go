package main

import (
	"cmp"
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

// Defaults of the configuration.
const (
	ResourceDefault = "volumesnapshotcontents.snapshot.storage.k8s.io"
	FieldDefault    = "status.snapshotHandle"
	// OwnerLabelDefault is the label that names the backup an item belongs
	// to; Velero sets it on the VolumeSnapshotContents it creates.
	OwnerLabelDefault = "velero.io/backup-name"
	// RetryAfter is when a locked snapshot is worth retrying.
	RetryAfter = time.Minute
)

// action deletes snapshot files.
type action struct {
	dir      string
	resource string
	field    []string
	owner    string // label naming the item's backup
}

var _ plugin.DeleteItemAction = (*action)(nil)

func newAction(getenv func(string) string) *action {
	return &action{
		dir:      getenv("LETHE_SNAPSHOT_DIR"),
		resource: cmp.Or(getenv("LETHE_SNAPSHOT_RESOURCE"), ResourceDefault),
		field:    strings.Split(cmp.Or(getenv("LETHE_SNAPSHOT_FIELD"), FieldDefault), "."),
		owner:    cmp.Or(getenv("LETHE_SNAPSHOT_OWNER_LABEL"), OwnerLabelDefault),
	}
}

func (a *action) AppliesTo(context.Context) (plugin.ResourceSelector, error) {
	return plugin.ResourceSelector{IncludedResources: []string{a.resource}}, nil
}

func (a *action) Execute(ctx context.Context, in *plugin.DeleteItemActionInput) error {
	if a.dir == "" {
		return errors.New("LETHE_SNAPSHOT_DIR is not set: cannot delete snapshots")
	}
	obj, err := in.Item.Unstructured()
	if err != nil {
		return fmt.Errorf("decode item: %w", err)
	}
	// Never delete what another backup owns: a snapshot shared by two
	// backups is deleted with the backup that created it.
	if owner, ok := lookup(obj, []string{"metadata", "labels", a.owner}); ok && owner != in.Backup.Name {
		return plugin.Skipped(fmt.Sprintf("item belongs to backup %q (label %s), not to %q; leaving its snapshot alone", owner, a.owner, in.Backup.Name))
	}
	name, ok := lookup(obj, a.field)
	if !ok || name == "" {
		return plugin.Skipped(fmt.Sprintf("item has no %s", strings.Join(a.field, ".")))
	}
	if !filepath.IsLocal(name) || strings.ContainsRune(name, filepath.Separator) {
		return fmt.Errorf("snapshot name %q is not a plain file name inside the snapshot directory; refusing it", name)
	}
	root, err := os.OpenRoot(a.dir)
	if err != nil {
		return fmt.Errorf("snapshot directory: %w", err)
	}
	defer root.Close()
	if _, err := root.Lstat(name + ".lock"); err == nil {
		return plugin.Blocked(RetryAfter, fmt.Sprintf("snapshot %s is locked (%s.lock exists)", name, name))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("check lock of snapshot %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err = root.Remove(name)
	if err == nil {
		plugin.Logger(ctx).Info("deleted snapshot", "snapshot", name, "backup", in.Backup.Name)
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil // already gone: deletion is idempotent
	}
	return fmt.Errorf("delete snapshot %s: %w", name, err)
}

// lookup follows a dotted path of object keys to a string.
func lookup(obj map[string]any, path []string) (string, bool) {
	var cur any = obj
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[k]; !ok {
			return "", false
		}
	}
	s, ok := cur.(string)
	return s, ok
}
