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

// Sync actions of backups the catalog has whose tarball a listing did
// (not) find.
const (
	// SyncMissing: the tarball is not in the storage listing; the backup
	// has the condition MissingFromStorage.
	SyncMissing = "missing-from-storage"
	// SyncFound: a backup that was missing is in the listing again; its
	// condition MissingFromStorage is cleared.
	SyncFound = "back-in-storage"
	// SyncPruned: a missing backup removed from the catalog by
	// --prune-missing (audited; its tombstone stays).
	SyncPruned = "pruned"
)

// catalogBackups reads every backup of the catalog once, by name: a sync
// then costs one paged catalog read, not one query per folder.
func (g *Registry) catalogBackups(ctx context.Context) (map[string]*catalog.Resource, error) {
	out := map[string]*catalog.Resource{}
	opts := catalog.ListOptions{Kind: backup.Kind, Limit: 1000}
	for {
		page, err := g.cfg.Store.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Items {
			out[r.Name] = r
		}
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

// inThisLocation says whether a backup was registered in the location
// this registry syncs (an empty recorded location is the configured one).
func (g *Registry) inThisLocation(b *backup.Backup) bool {
	if b.Spec.StorageLocation == "" {
		return true
	}
	rec, err1 := blobstore.Location(b.Spec.StorageLocation)
	here, err2 := blobstore.Location(g.cfg.Blobs.URL())
	return err1 == nil && err2 == nil && rec == here
}

// checkMissing compares the catalog's Active and Scheduled backups of this
// location with a listing that succeeded (listed: every key in it). A
// backup whose tarball is not listed gets MissingFromStorage (and, with
// opts.PruneMissing, is removed from the catalog, audited); one listed
// again loses it. A Deleting backup is left to its deletion, which
// removes the tarball itself.
func (g *Registry) checkMissing(ctx context.Context, known map[string]*catalog.Resource, listed map[string]bool, opts SyncOptions) ([]SyncResult, error) {
	var out []SyncResult
	for _, name := range sortedNames(known) {
		r := known[name]
		if r.Phase != catalog.PhaseActive && r.Phase != catalog.PhaseScheduled {
			continue
		}
		b, err := backup.FromResource(r)
		if err != nil || !g.inThisLocation(b) || b.Spec.StorageKey == "" {
			continue
		}
		cond := findCondition(r, backup.ConditionMissingFromStorage)
		wasMissing := cond != nil && cond.Status == "True"
		present := listed[b.Spec.StorageKey]
		if present && !wasMissing {
			continue
		}
		res := SyncResult{Kind: SyncResultKind, Name: name}
		switch {
		case present:
			res.Action, res.Reason = SyncFound, "its tarball is in storage again"
		case opts.PruneMissing && wasMissing:
			res.Action, res.Reason = SyncPruned, "missing from storage: removed from the catalog (audited); its tombstone stays"
		default:
			res.Action = SyncMissing
			res.Reason = fmt.Sprintf("%s is not in %s: the backup stays in the catalog; 'lethe backup sync --prune-missing' removes it", b.Spec.StorageKey, g.cfg.Blobs.URL())
			if wasMissing {
				res.Reason = "still " + res.Reason
			}
		}
		if opts.DryRun {
			out = append(out, res)
			continue
		}
		switch {
		case res.Action == SyncPruned:
			purged, err := g.cfg.Store.CollectBatch(ctx, []catalog.CollectItem{{
				UID: r.UID, ResourceVersion: r.ResourceVersion,
				Reason: "backup sync --prune-missing: " + b.Spec.StorageKey + " missing from " + g.cfg.Blobs.URL(),
			}})
			if err != nil {
				return nil, err
			}
			if len(purged) == 0 {
				res.Action, res.Reason = SyncSkipped, "changed meanwhile, or something still depends on it: not pruned"
			}
		case !present && wasMissing:
			// Still missing: nothing to write.
		default:
			msg := res.Reason
			if err := g.setMissing(ctx, r, !present, msg); err != nil {
				return nil, err
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// setMissing sets (missing) or clears MissingFromStorage on r, re-read on
// a conflict.
func (g *Registry) setMissing(ctx context.Context, r *catalog.Resource, missing bool, msg string) error {
	for range 3 {
		c := catalog.Condition{Type: backup.ConditionMissingFromStorage, Status: "False", Reason: "Listed", Message: "", LastTransitionTime: g.cfg.Now().UTC().Truncate(time.Second)}
		if missing {
			c.Status, c.Reason, c.Message = "True", "NotListed", msg
		}
		setCondition(r, c)
		_, err := g.cfg.Store.Update(ctx, r)
		if !errors.Is(err, catalog.ErrConflict) {
			return err
		}
		cur, err := g.cfg.Store.Get(ctx, r.Key())
		if err != nil {
			return err
		}
		if cur.UID != r.UID || (cur.Phase != catalog.PhaseActive && cur.Phase != catalog.PhaseScheduled) {
			return nil
		}
		r = cur
	}
	return fmt.Errorf("backup %s: recording %s: %w", r.Name, backup.ConditionMissingFromStorage, catalog.ErrConflict)
}

func findCondition(r *catalog.Resource, t string) *catalog.Condition {
	for i := range r.Conditions {
		if r.Conditions[i].Type == t {
			return &r.Conditions[i]
		}
	}
	return nil
}

func setCondition(r *catalog.Resource, c catalog.Condition) {
	if old := findCondition(r, c.Type); old != nil {
		*old = c
		return
	}
	r.Conditions = append(r.Conditions, c)
}
