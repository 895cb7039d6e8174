package deletion

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/velero"
)

// purgeFolder removes everything stored for the backup: every key under
// its folder backups/<name>/ (Velero's layout: velero-backup.json, the
// tarball, the logs, the results, the resource and snapshot lists), not
// only the tarball.
//
// velero-backup.json goes first. Velero's own sync imports a backup from
// that file, so once it is gone no Velero can bring the backup back,
// whatever else is still there; the other keys follow in listing order.
// A crash in the middle leaves a folder without velero-backup.json, which
// neither Velero's sync nor Lethe's imports, and the backup still in
// Deleting without its delete-actions finalizer: the next run purges again
// from here, and deleting a key already gone is not an error.
//
// tarballGone reports that the tarball was not there to delete. removed
// lists the keys deleted, in order.
func (d *Deleter) purgeFolder(ctx context.Context, bl blobstore.Store, b *backup.Backup) (tarballGone bool, removed []string, err error) {
	keys, listed, err := folderKeys(ctx, bl, b)
	if err != nil {
		return false, nil, fmt.Errorf("backup %s: listing what to purge: %w", b.Name(), err)
	}
	tarballGone = !listed
	for _, k := range keys {
		if d.hooks.beforePurgeKey != nil {
			d.hooks.beforePurgeKey(k)
		}
		if err := bl.Delete(ctx, k); errors.Is(err, blobstore.ErrNotFound) {
			continue
		} else if err != nil {
			return false, removed, fmt.Errorf("backup %s: removing %s/%s: %w", b.Name(), bl.URL(), k, err)
		}
		removed = append(removed, k)
	}
	return tarballGone, removed, nil
}

// folderKeys lists what purgeFolder deletes, in order: velero-backup.json
// first, then the rest of the backup's own folder, backups/<name>/ (never
// a folder a row names: checkStorage made sure that the storage key is
// the backup's own tarball, in that folder). The tarball is included even
// when the listing does not show it (listed is false then: it is gone
// already).
func folderKeys(ctx context.Context, bl blobstore.Store, b *backup.Backup) (keys []string, listed bool, err error) {
	dir := velero.BackupDir(b.Name())
	if path.Dir(b.Spec.StorageKey)+"/" != dir {
		return nil, false, fmt.Errorf("%w: backup %s: its storage key %s is outside its folder %s", ErrStorageRefused, b.Name(), termtext.Quote(b.Spec.StorageKey), dir)
	}
	objs, err := bl.List(ctx, dir)
	if err != nil {
		return nil, false, err
	}
	meta := dir + velero.MetadataFile
	keys = make([]string, 0, len(objs)+1)
	for _, o := range objs {
		if o.Key == meta {
			keys = append([]string{meta}, keys...)
			continue
		}
		keys = append(keys, o.Key)
	}
	listed = slices.Contains(keys, b.Spec.StorageKey)
	if !listed {
		keys = append(keys, b.Spec.StorageKey)
	}
	return keys, listed, nil
}

// purgedOthers says, for the report, what a purge removed besides the
// tarball (the audit details list every key).
func purgedOthers(bl blobstore.Store, b *backup.Backup, removed []string) []string {
	n, meta := 0, false
	for _, k := range removed {
		if k != b.Spec.StorageKey {
			n++
			meta = meta || path.Base(k) == velero.MetadataFile
		}
	}
	if n == 0 {
		return nil
	}
	s := fmt.Sprintf("%d other files under %s", n, blobstore.ObjectURL(bl.URL(), path.Dir(b.Spec.StorageKey)+"/"))
	if meta {
		s += " (" + velero.MetadataFile + " first)"
	}
	return []string{s}
}

// planFolder says, for a plan, what a purge removes besides the tarball;
// "" when the tarball is not in a folder of its own.
func planFolder(b *backup.Backup) string {
	dir := path.Dir(b.Spec.StorageKey) + "/"
	if !strings.HasPrefix(dir, velero.BackupsDir) || dir == velero.BackupsDir {
		return ""
	}
	return "every other file under " + dir + " (" + velero.MetadataFile + " first, so that Velero's sync cannot bring the backup back)"
}
