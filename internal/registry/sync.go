package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
)

// Sync actions.
const (
	SyncImported    = "imported"
	SyncWouldImport = "would-import"
	SyncSkipped     = "skipped"
	SyncRejected    = "rejected"
)

// SyncResult is one tarball's fate in a sync.
type SyncResult struct {
	Name   string `json:"name"`
	Action string `json:"action"` // imported, would-import, skipped, rejected
	Reason string `json:"reason,omitempty"`
	Items  int64  `json:"items,omitempty"`
}

// SyncOptions tune Sync.
type SyncOptions struct {
	// DryRun says what would be imported and changes nothing.
	DryRun bool
}

// AnnotationImportedFrom records the storage key a sync imported.
const AnnotationImportedFrom = "lethe.io/imported-from"

// Sync imports the backup tarballs found in storage that the catalog does
// not know. The sync filter: a backup in the catalog is never touched,
// whatever its phase (a deletion pending is never undone by a sync), and
// one that was purged (its tombstone remains) is never re-imported.
// Each tarball is validated, and its expected plugins recorded, in one
// pass; a hostile one is reported as rejected and skipped.
//
// While some plugin binary cannot be loaded, Sync imports nothing (see
// PluginProblemsError); a dry run still reports.
func (g *Registry) Sync(ctx context.Context, opts SyncOptions) ([]SyncResult, error) {
	if !opts.DryRun {
		if err := g.checkPlugins(); err != nil {
			return nil, err
		}
	}
	objs, err := g.cfg.Blobs.List(ctx, "backups/")
	if err != nil {
		return nil, err
	}
	results := []SyncResult{}
	for _, o := range objs {
		name, ok := backup.NameFromStorageKey(o.Key)
		if !ok {
			continue
		}
		res := SyncResult{Name: name}
		skip, err := g.syncFilter(ctx, name)
		if err != nil {
			return nil, err
		}
		switch {
		case skip != "":
			res.Action, res.Reason = SyncSkipped, skip
		case backup.ValidateNewName(name) != nil:
			res.Action, res.Reason = SyncRejected, backup.ValidateNewName(name).Error()
		default:
			if err := g.importOne(ctx, o.Key, &res, opts); err != nil {
				return nil, err
			}
		}
		results = append(results, res)
	}
	return results, nil
}

// syncFilter says why a tarball named name must not be imported, or "".
func (g *Registry) syncFilter(ctx context.Context, name string) (string, error) {
	r, err := g.cfg.Store.Get(ctx, backup.Key(name))
	switch {
	case err == nil:
		if r.Phase != catalog.PhaseActive {
			return "deletion pending (" + string(r.Phase) + "): never re-imported", nil
		}
		return "in the catalog (" + string(r.Phase) + ")", nil
	case !errors.Is(err, catalog.ErrNotFound):
		return "", err
	}
	queued, err := g.cfg.Store.ListRetries(ctx, catalog.RetryFilter{Key: backup.Key(name).String(), Limit: 1})
	if err != nil {
		return "", err
	}
	if len(queued) > 0 {
		return fmt.Sprintf("in the retry queue (row %d, %s): its deletion is not finished, never re-imported", queued[0].ID, queued[0].State), nil
	}
	ts, err := g.cfg.Store.GetTombstone(ctx, backup.Key(name))
	switch {
	case err == nil:
		return fmt.Sprintf("purged at %s: a deleted backup is never re-imported", ts.PurgedAt.Local().Format(time.RFC3339)), nil
	case errors.Is(err, catalog.ErrNotFound):
		return "", nil
	default:
		return "", err
	}
}

func (g *Registry) importOne(ctx context.Context, key string, res *SyncResult, opts SyncOptions) error {
	// The identity recorded is the one of the object scanned: the read is
	// pinned to what Stat reported.
	a, err := g.cfg.Blobs.Stat(ctx, key)
	if err != nil {
		return err
	}
	rc, err := g.cfg.Blobs.OpenVersion(ctx, key, a.Version)
	if errors.Is(err, blobstore.ErrVersionMismatch) {
		res.Action, res.Reason = SyncRejected, "the tarball changed while it was being read; run the sync again"
		return nil
	}
	if err != nil {
		return err
	}
	sc, verr := g.scan(rc)
	rc.Close()
	if verr != nil {
		res.Action, res.Reason = SyncRejected, verr.Error()
		return nil
	}
	res.Items = sc.sum.Items
	if opts.DryRun {
		res.Action = SyncWouldImport
		return nil
	}
	b := &backup.Backup{
		Resource: &catalog.Resource{Kind: backup.Kind, Name: res.Name, Annotations: map[string]string{AnnotationImportedFrom: key}},
		Spec:     g.spec(key, a.Size, a.Version, sc),
	}
	if err := b.Encode(); err != nil {
		return err
	}
	if _, err := g.cfg.Store.Create(ctx, b.Resource); errors.Is(err, catalog.ErrAlreadyExists) {
		res.Action, res.Reason = SyncSkipped, "registered meanwhile by another process"
		return nil
	} else if err != nil {
		return err
	}
	res.Action = SyncImported
	return nil
}
