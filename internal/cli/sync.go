package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// syncResult is one tarball's fate in a sync.
type syncResult struct {
	Name   string `json:"name"`
	Action string `json:"action"` // imported, would-import, skipped, rejected
	Reason string `json:"reason,omitempty"`
	Items  int64  `json:"items,omitempty"`
}

func newBackupSyncCmd(a *app) *cobra.Command {
	var dryRun bool
	c := &cobra.Command{
		Use:   "sync",
		Short: "Import backups that exist in storage but not in the catalog",
		Long: `Sync lists the tarballs in the backup storage (backups/<name>/<name>.tar.gz)
and records every one the catalog does not know. It never re-imports a
backup whose deletion is scheduled or running, nor one that was purged (its
tombstone remains): a deleted backup does not come back. Each tarball is
validated before it is imported; a hostile one is reported and skipped.`,
		Example: `  lethe backup sync --dry-run
  lethe backup sync -o json`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be imported, and change nothing")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		results, err := a.sync(cmd.Context(), dryRun)
		if err != nil {
			return err
		}
		if *out != "table" {
			return printStructured(a.s.Out, *out, results)
		}
		if len(results) == 0 {
			fmt.Fprintf(a.s.Out, "No tarballs in %s.\n", a.blobs.URL())
			return nil
		}
		t := newTable(a.s.Out, "NAME", "ACTION", "ITEMS", "REASON")
		for _, r := range results {
			t.row(r.Name, r.Action, fmt.Sprint(r.Items), r.Reason)
		}
		return t.flush()
	}
	return c
}

func (a *app) sync(ctx context.Context, dryRun bool) ([]syncResult, error) {
	st, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	bl, err := a.storage(ctx)
	if err != nil {
		return nil, err
	}
	objs, err := bl.List(ctx, "backups/")
	if err != nil {
		return nil, err
	}
	results := []syncResult{}
	for _, o := range objs {
		name, ok := backup.NameFromStorageKey(o.Key)
		if !ok {
			continue
		}
		res := syncResult{Name: name}
		r, err := st.Get(ctx, backup.Key(name))
		switch {
		case err == nil:
			res.Action, res.Reason = "skipped", "in the catalog ("+string(r.Phase)+")"
			if r.Phase != catalog.PhaseActive {
				res.Reason = "deletion pending (" + string(r.Phase) + "): never re-imported"
			}
		case !errors.Is(err, catalog.ErrNotFound):
			return nil, err
		default:
			if ts, terr := st.GetTombstone(ctx, backup.Key(name)); terr == nil {
				res.Action = "skipped"
				res.Reason = fmt.Sprintf("purged at %s: a deleted backup is never re-imported", ts.PurgedAt.Local().Format(time.RFC3339))
				break
			} else if !errors.Is(terr, catalog.ErrNotFound) {
				return nil, terr
			}
			rc, err := bl.Open(ctx, o.Key)
			if err != nil {
				return nil, err
			}
			sum, verr := archive.Validate(rc, archive.Limits{})
			rc.Close()
			if verr != nil {
				res.Action, res.Reason = "rejected", verr.Error()
				break
			}
			res.Items = sum.Items
			if dryRun {
				res.Action = "would-import"
				break
			}
			b := &backup.Backup{
				Resource: &catalog.Resource{Kind: backup.Kind, Name: name, Annotations: map[string]string{"lethe.io/imported-from": o.Key}},
				Spec:     backup.Spec{StorageKey: o.Key, Size: o.Size, Digest: sum.Digest, Items: sum.Items, CopyOnlyItems: sum.CopyOnlyItems},
			}
			if err := b.Encode(); err != nil {
				return nil, err
			}
			if _, err := st.Create(ctx, b.Resource); err != nil {
				return nil, err
			}
			res.Action = "imported"
		}
		results = append(results, res)
	}
	return results, nil
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}
