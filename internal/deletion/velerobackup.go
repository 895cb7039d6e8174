package deletion

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/storageloc"
	"github.com/lethehq/lethe/internal/velero"
)

// sessionOptions are the plugin session options of one run. A backup
// imported from a Velero bucket gives the unmodified Velero plugins its
// own velero-backup.json, with status.phase Deleting, as Velero's
// deletion controller sends it (SessionOptions.VeleroBackup): the copy
// the last sync recorded in the catalog, so that a file that became
// unreadable, or was removed, since never yields an invented Backup.
// Lethe's plugins, and every plugin of a backup without one, get the
// Backup built from the catalog.
//
// A backup synced before Lethe recorded the file has no copy: its
// velero-backup.json is read from storage, and, if gone or no longer a
// Backup of this name, replaced by the built one with a warning; storage
// that cannot be read is an error (the run is tried again).
func (d *Deleter) sessionOptions(ctx context.Context, b *backup.Backup, infos []pluginhost.Info) (pluginhost.SessionOptions, error) {
	opts := d.cfg.Session
	opts.VeleroLocation = cmp.Or(b.Spec.Location, storageloc.DefaultName)
	if b.Spec.Velero == nil || b.Spec.Velero.MetadataKey == "" ||
		!slices.ContainsFunc(infos, func(in pluginhost.Info) bool { return in.Protocol == pluginhost.ProtocolVelero }) {
		return opts, nil
	}
	data := []byte(b.Spec.Velero.Object)
	if len(data) == 0 {
		var err error
		if data, err = d.readVeleroBackup(ctx, b); err != nil || data == nil {
			return opts, err
		}
	}
	if _, err := velero.ParseBackup(data, b.Name()); err != nil {
		d.log.Warn("the backup's recorded "+velero.MetadataFile+" is not usable; Velero plugins get the Backup built from the catalog",
			"backup", b.Name(), "error", err)
		return opts, nil
	}
	obj, err := velero.DeletingObject(data)
	if err != nil {
		return opts, fmt.Errorf("backup %s: %w", b.Name(), err)
	}
	opts.VeleroBackup = obj
	return opts, nil
}

// readVeleroBackup reads the velero-backup.json of a backup that has no
// recorded copy; nil (and no error) when it is gone.
func (d *Deleter) readVeleroBackup(ctx context.Context, b *backup.Backup) ([]byte, error) {
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return nil, err
	}
	key := b.Spec.Velero.MetadataKey
	rc, err := bl.Open(ctx, key)
	if errors.Is(err, blobstore.ErrNotFound) {
		d.log.Warn("the backup's "+velero.MetadataFile+" is gone, and no copy was recorded; Velero plugins get the Backup built from the catalog",
			"backup", b.Name(), "key", key)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backup %s: reading %s: %w", b.Name(), blobstore.ObjectURL(bl.URL(), key), err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, velero.MaxMetadataSize+1))
	if err != nil {
		return nil, fmt.Errorf("backup %s: reading %s: %w", b.Name(), blobstore.ObjectURL(bl.URL(), key), err)
	}
	return data, nil
}
