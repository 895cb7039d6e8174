package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/server"
	"github.com/lethehq/lethe/internal/storageloc"
	"github.com/lethehq/lethe/internal/termtext"
)

// syncLocations syncs every declared location, each through the sync
// filter, and records each one's check and sync (storageloc.Record; with
// the leader's fenced context, the writes carry its term). A location
// that cannot be read is recorded Unavailable and concludes nothing; the
// others are synced all the same. The error joins the failures.
func (a *app) syncLocations(ctx context.Context, opts registry.SyncOptions) ([]registry.SyncResult, error) {
	set, err := a.locationSet()
	if err != nil {
		return nil, err
	}
	locs, err := a.storageLocations(ctx)
	if err != nil {
		return nil, err
	}
	st, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	h, err := a.plugins(ctx)
	if err != nil {
		return nil, err
	}
	var all []registry.SyncResult
	var errs []error
	for _, l := range set {
		bl, cerr := storageloc.Check(ctx, locs, l)
		if !opts.DryRun {
			if err := storageloc.Record(ctx, st, l, storageloc.Checked(time.Now(), cerr)); err != nil {
				return all, err
			}
		}
		if cerr != nil {
			errs = append(errs, fmt.Errorf("location %s: %w", termtext.Quote(l.Name), cerr))
			continue
		}
		reg, err := registry.New(&registry.Config{Store: st, Blobs: bl, Plugins: h, LocationName: l.Name})
		if err != nil {
			return all, err
		}
		checked := opts
		checked.Checked = true // storageloc.Check just did
		res, err := reg.Sync(ctx, checked)
		if err != nil {
			errs = append(errs, fmt.Errorf("location %s: %w", termtext.Quote(l.Name), err))
			continue
		}
		for i := range res {
			res[i].Location = l.Name
		}
		all = append(all, res...)
		if !opts.DryRun {
			if err := storageloc.Record(ctx, st, l, storageloc.Synced(time.Now())); err != nil {
				return all, err
			}
		}
	}
	return all, errors.Join(errs...)
}

// serverSync is the storage sync the server's leader runs: the same as
// 'lethe backup sync', through the sync filter, over every location, with
// the leader's fenced context (every catalog write carries its term).
func (a *app) serverSync(ctx context.Context) (server.SyncFunc, error) {
	if _, err := a.locationSet(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (server.SyncSummary, error) {
		results, err := a.syncLocations(ctx, registry.SyncOptions{})
		var sum server.SyncSummary
		for _, r := range results {
			switch r.Action {
			case registry.SyncImported:
				sum.Imported++
			case registry.SyncUpdated:
				sum.Updated++
			case registry.SyncRejected:
				sum.Rejected++
				a.log.Warn("storage sync rejected a backup folder", "location", r.Location, "backup", r.Name, "reason", r.Reason)
			case registry.SyncMissing:
				sum.Missing++
			case registry.SyncFound:
				sum.Found++
			}
		}
		return sum, err
	}, nil
}
