package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/velero"
)

// refresh re-reads the velero-backup.json of a backup the catalog already
// has, and records what changed: its phase above
// all, since Velero rewrites the file as a backup moves from InProgress
// or Finalizing to Completed, and only a finished backup may be deleted
// (velero.Finished). The file is read again while the recorded phase is
// unfinished, and whenever its size or modification time in the listing
// differ from the recorded ones; a finished backup whose file did not
// change costs no GET.
//
// Unknown is not absent: a file that cannot be read or parsed changes
// nothing (the phase recorded stays, whatever it is), and the result
// says so in its warning.
func (g *Registry) refresh(ctx context.Context, r *catalog.Resource, f *folder, res *SyncResult, opts SyncOptions) error {
	b, err := backup.FromResource(r)
	if err != nil {
		res.Warning = err.Error()
		return nil
	}
	v := b.Spec.Velero
	if v != nil && v.MetadataKey != "" && v.MetadataKey != f.metadata.Key {
		return nil // recorded from another key: not this file's backup
	}
	_, unfinished := b.Unfinished()
	if v != nil && len(v.Object) > 0 && !unfinished &&
		v.MetadataSize == f.metadata.Size && v.MetadataModTime.Equal(f.metadata.ModTime.UTC()) {
		return nil
	}
	m, raw, err := g.readMetadata(ctx, f)
	if err != nil {
		phase := "(none recorded)"
		if v != nil {
			phase = quotePhase(v.Phase)
		}
		res.Warning = fmt.Sprintf("%s; the phase recorded stays %s", err, phase)
		return nil
	}
	if v != nil && v.Phase == m.Status.Phase && bytes.Equal(v.Object, raw) {
		return nil
	}
	was := "(none)"
	if v != nil {
		was = quotePhase(v.Phase)
	}
	res.Action, res.Reason = SyncUpdated, fmt.Sprintf("Velero phase %s, was %s", quotePhase(m.Status.Phase), was)
	if opts.DryRun {
		return nil
	}
	for range 3 {
		applyRefresh(b, m, f, raw)
		if err := b.Encode(); err != nil {
			return err
		}
		_, err := g.cfg.Store.Update(ctx, b.Resource)
		if !errors.Is(err, catalog.ErrConflict) {
			return err
		}
		cur, err := g.cfg.Store.Get(ctx, r.Key())
		if err != nil {
			return err
		}
		if cur.UID != r.UID {
			res.Action, res.Reason = SyncSkipped, "changed meanwhile by another process"
			return nil
		}
		if b, err = backup.FromResource(cur); err != nil {
			return err
		}
	}
	return fmt.Errorf("backup %s: recording its Velero phase: %w", r.Name, catalog.ErrConflict)
}

// applyRefresh records a re-read velero-backup.json in b: the phase, the
// file, and what Velero may set as the backup finishes (the expiration,
// once there was none).
func applyRefresh(b *backup.Backup, m *velero.Backup, f *folder, raw []byte) {
	expires := b.Spec.ExpiresAt
	created := b.Spec.CreatedAt
	ttl := b.Spec.TTL
	labels := b.Resource.Labels
	applyMetadata(b, m, f.metadata, raw)
	// What the operator may have changed in Lethe since the import stays.
	b.Resource.Labels = labels
	if expires != nil {
		b.Spec.ExpiresAt, b.Spec.TTL = expires, ttl
	}
	if created != nil {
		b.Spec.CreatedAt = created
	}
}

func quotePhase(p string) string {
	if p == "" {
		return `""`
	}
	return p
}
