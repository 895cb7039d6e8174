package deletion

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/velero"
)

// sessionOptions are the plugin session options of one run. A backup
// imported from a Velero bucket gives the unmodified Velero plugins its
// own velero-backup.json, as Velero would (SessionOptions.VeleroBackup),
// read from its storage when a Velero plugin is installed; Lethe's
// plugins, and every plugin of a backup without one, get the Backup
// built from the catalog. A velero-backup.json that is gone or no
// longer a Backup of this name is replaced by the built one, with a
// warning; storage that cannot be read is an error (the run is tried
// again).
func (d *Deleter) sessionOptions(ctx context.Context, b *backup.Backup, infos []pluginhost.Info) (pluginhost.SessionOptions, error) {
	opts := d.cfg.Session
	if b.Spec.Velero == nil || b.Spec.Velero.MetadataKey == "" ||
		!slices.ContainsFunc(infos, func(in pluginhost.Info) bool { return in.Protocol == pluginhost.ProtocolVelero }) {
		return opts, nil
	}
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return opts, err
	}
	key := b.Spec.Velero.MetadataKey
	rc, err := bl.Open(ctx, key)
	if errors.Is(err, blobstore.ErrNotFound) {
		d.log.Warn("the backup's "+velero.MetadataFile+" is gone; Velero plugins get the Backup built from the catalog",
			"backup", b.Name(), "key", key)
		return opts, nil
	}
	if err != nil {
		return opts, fmt.Errorf("backup %s: reading %s: %w", b.Name(), blobstore.ObjectURL(bl.URL(), key), err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, velero.MaxMetadataSize+1))
	if err != nil {
		return opts, fmt.Errorf("backup %s: reading %s: %w", b.Name(), blobstore.ObjectURL(bl.URL(), key), err)
	}
	if _, err := velero.ParseBackup(data, b.Name()); err != nil {
		d.log.Warn("the backup's "+velero.MetadataFile+" is no longer usable; Velero plugins get the Backup built from the catalog",
			"backup", b.Name(), "key", key, "error", err)
		return opts, nil
	}
	opts.VeleroBackup = data
	return opts, nil
}
