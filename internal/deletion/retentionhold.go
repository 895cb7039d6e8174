package deletion

import (
	"context"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retention"
)

// AnnotationRetentionHold records why undelete put the
// lethe.io/retain=true hold on a backup: which policy had scheduled it,
// and when it was undeleted.
const AnnotationRetentionHold = "lethe.io/retain-reason"

// scheduledByPolicy returns the RetentionPolicy that scheduled r's
// current deletion (the newest "schedule" entry of its audit log, by
// actor), or "". Every catalog driver keeps an audit log; a store
// without one (a test's fake) has no policy-scheduled backups.
func scheduledByPolicy(ctx context.Context, st UndeleteCatalog, r *catalog.Resource) (string, error) {
	a, ok := st.(catalog.Audit)
	if !ok {
		return "", nil
	}
	entries, err := a.ListAudit(ctx, catalog.AuditFilter{Kind: r.Kind, Name: r.Name, UID: r.UID, Limit: 50})
	if err != nil {
		return "", err
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Action == "schedule" {
			policy, ok := strings.CutPrefix(entries[i].Actor, retention.ActorPrefix)
			if !ok {
				return "", nil
			}
			// The server's writes name the leader's term after the actor
			// ("retention:nightly-gfs (leader term 3)"); a policy's name
			// holds no space.
			policy, _, _ = strings.Cut(policy, " ")
			return policy, nil
		}
	}
	return "", nil
}

// holdFromPolicy labels r lethe.io/retain=true: undeleting what a policy
// scheduled means "keep this one", and without the hold the policy would
// schedule it again at its next run (DESIGN §10: a hold wins).
func holdFromPolicy(r *catalog.Resource, policy string, now time.Time) {
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	r.Labels[retention.HoldLabel] = retention.HoldValue
	if r.Annotations == nil {
		r.Annotations = map[string]string{}
	}
	r.Annotations[AnnotationRetentionHold] = "undeleted at " + now.UTC().Format(time.RFC3339) + " after RetentionPolicy " + policy + " scheduled it"
}
