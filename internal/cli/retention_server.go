package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/retention"
	"github.com/lethehq/lethe/internal/retention/planner"
	"github.com/lethehq/lethe/internal/server"
)

// retentionLoop is the server's retention enforcer (a leader loop) and
// its TTL veto for policies with overrideTTL. Deletions go through the
// same pipeline as TTL expiry: softly, with the policy's deletionDelay
// (else the backup's annotation, else --default-deletion-delay).
func (a *app) retentionLoop(del *deletion.Deleter, interval time.Duration) (server.Loop, func(context.Context, string) (string, error), error) {
	if interval < time.Second {
		return server.Loop{}, nil, usageError{fmt.Errorf("--retention-interval must be at least 1s, got %s", interval)}
	}
	e, err := planner.NewEnforcer(&planner.EnforcerConfig{
		Store: a.store, Logger: a.log, Interval: interval,
		Delete: func(ctx context.Context, _, name string, delay *time.Duration, reason string) error {
			_, err := del.Delete(ctx, name, deletion.Options{
				Reason: reason, Async: true, Unattended: true, Delay: delay, DefaultDelay: a.g.defaultDelayD,
			})
			return err
		},
	})
	if err != nil {
		return server.Loop{}, nil, err
	}
	veto := func(ctx context.Context, name string) (string, error) {
		r, err := a.store.Get(ctx, backup.Key(name))
		if err != nil {
			return "", err
		}
		return planner.OverridingTTL(ctx, a.store, r)
	}
	return server.Loop{Name: "retention", Run: e.Run}, veto, nil
}

// printRetentionHold says so when undelete put the retention hold on r.
func printRetentionHold(a *app, r *catalog.Resource) {
	if r == nil || r.Annotations[deletion.AnnotationRetentionHold] == "" {
		return
	}
	fmt.Fprintf(a.s.Out, "A RetentionPolicy had scheduled it, so it is now held (label %s=%s): no policy deletes it while the label stays.\n",
		retention.HoldLabel, retention.HoldValue)
}
