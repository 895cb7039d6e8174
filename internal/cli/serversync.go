package cli

import (
	"context"

	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/server"
)

// serverSync is the storage sync the server's leader runs: the same as
// 'lethe backup sync', through the sync filter, with the leader's fenced
// context (every catalog write carries its term).
func (a *app) serverSync(ctx context.Context) (server.SyncFunc, error) {
	reg, err := a.registry(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (server.SyncSummary, error) {
		results, err := reg.Sync(ctx, registry.SyncOptions{})
		if err != nil {
			return server.SyncSummary{}, err
		}
		var sum server.SyncSummary
		for _, r := range results {
			switch r.Action {
			case registry.SyncImported:
				sum.Imported++
			case registry.SyncUpdated:
				sum.Updated++
			case registry.SyncRejected:
				sum.Rejected++
				a.log.Warn("storage sync rejected a backup folder", "backup", r.Name, "reason", r.Reason)
			case registry.SyncMissing:
				sum.Missing++
			case registry.SyncFound:
				sum.Found++
			}
		}
		return sum, nil
	}, nil
}
