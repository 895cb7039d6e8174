package planner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/retention"
)

// IntervalDefault is how often the enforcer evaluates the policies when
// nothing changes, and the pace of a policy that maxDeletesPerRun holds
// back.
const IntervalDefault = 10 * time.Minute

// DebounceDefault gathers a burst of changes (a sync) into one
// evaluation.
const DebounceDefault = 2 * time.Second

// Deleter requests one backup's deletion for a policy, softly with delay
// when it is set (else the backup's or the configured default), audited
// with actor retention.ActorPrefix+policy and reason.
type Deleter func(ctx context.Context, policy, backup string, delay *time.Duration, reason string) error

// EnforcerStore is what the enforcer reads and watches.
type EnforcerStore interface {
	Store
	catalog.Feed
}

// EnforcerConfig configures an Enforcer.
type EnforcerConfig struct {
	Store    EnforcerStore
	Delete   Deleter
	Logger   hclog.Logger
	Now      func() time.Time
	Interval time.Duration
	Debounce time.Duration
}

// Enforcer carries out the plans of the policies in mode enforce: on an
// interval, and soon after backups or policies change. It is a
// singleton: `lethe server` runs it on the elected leader only.
type Enforcer struct {
	cfg EnforcerConfig
	log hclog.Logger
	// pausedUntil holds back, until the next interval, each policy that
	// maxDeletesPerRun capped (by name).
	pausedUntil map[string]time.Time
}

// NewEnforcer returns an Enforcer.
func NewEnforcer(cfg *EnforcerConfig) (*Enforcer, error) {
	c := *cfg
	if c.Store == nil || c.Delete == nil {
		return nil, errors.New("retention: EnforcerConfig.Store and Delete are required")
	}
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.Debounce = cmp.Or(c.Debounce, DebounceDefault)
	return &Enforcer{cfg: c, log: c.Logger.Named("retention"), pausedUntil: map[string]time.Time{}}, nil
}

// Run works until ctx ends.
func (e *Enforcer) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		version, err := e.cfg.Store.CurrentVersion(ctx)
		if err != nil {
			return err
		}
		_, err = e.RunOnce(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			e.log.Error("evaluating retention policies", "error", err)
		}
		if err := e.wait(ctx, version); err != nil {
			return err
		}
	}
	return nil
}

// wait returns at the interval, or a debounce after a change to a backup
// or a policy.
func (e *Enforcer) wait(ctx context.Context, version int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := e.cfg.Store.Watch(wctx, catalog.WatchOptions{FromVersion: version})
	if err != nil {
		return err
	}
	defer sub.Close()
	tick := time.NewTimer(e.cfg.Interval)
	defer tick.Stop()
	var debounce <-chan time.Time
	events := sub.Events()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			return nil
		case <-debounce:
			return nil
		case ev, ok := <-events:
			if !ok {
				if err := sub.Err(); err != nil {
					return err
				}
				events = nil
				continue
			}
			if debounce != nil || ev.Resource == nil {
				continue
			}
			if ev.Resource.Kind == backup.Kind || ev.Resource.Kind == manifest.KindRetentionPolicy {
				debounce = time.After(e.cfg.Debounce)
			}
		}
	}
}

// RunOnce evaluates every policy and requests the deletions of those in
// mode enforce. It reports whether maxDeletesPerRun held one back. A
// policy that the cap held back requests nothing more until an interval
// has passed, however many changes start runs meanwhile: the cap is a
// pace (at most maxDeletesPerRun per interval), not only a batch size.
func (e *Enforcer) RunOnce(ctx context.Context) (capped bool, err error) {
	now := e.cfg.Now()
	res, err := Build(ctx, e.cfg.Store, now)
	if errors.Is(err, ErrNoPolicy) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var errs []error
	for _, p := range res.Policies {
		if p.Spec.Mode != manifest.ModeEnforce {
			continue
		}
		name := p.Resource.Name
		if until, ok := e.pausedUntil[name]; ok && now.Before(until) {
			e.log.Debug("held back by maxDeletesPerRun until the next interval", "policy", name, "until", until)
			continue
		}
		delete(e.pausedUntil, name)
		for _, w := range p.Plan.Warnings {
			e.log.Warn(w)
		}
		for _, it := range p.Plan.Items {
			if it.Action == retention.Keep && len(it.Reasons) > 0 && strings.HasPrefix(it.Reasons[len(it.Reasons)-1], "postponed:") {
				capped = true
				e.pausedUntil[name] = now.Add(e.cfg.Interval)
				break
			}
		}
		var delay *time.Duration
		if p.Spec.HasDelay {
			delay = &p.Spec.DeletionDelay
		}
		for _, it := range p.Plan.Items {
			if it.Action != retention.Delete {
				continue
			}
			if ok, why := e.stillDeletable(ctx, p.Spec.Policy, it.Backup); !ok {
				e.log.Info("not deleting: changed since the plan", "policy", p.Resource.Name, "backup", it.Backup, "why", why)
				continue
			}
			reason := fmt.Sprintf("RetentionPolicy %s: %s", p.Resource.Name, strings.Join(it.Reasons, "; "))
			e.log.Info("requesting the deletion", "policy", p.Resource.Name, "backup", it.Backup, "reason", reason)
			if err := e.cfg.Delete(catalog.WithActor(ctx, retention.ActorPrefix+p.Resource.Name), p.Resource.Name, it.Backup, delay, reason); err != nil {
				if ctx.Err() != nil {
					return capped, ctx.Err()
				}
				errs = append(errs, fmt.Errorf("policy %s, backup %s: %w", p.Resource.Name, it.Backup, err))
			}
		}
	}
	return capped, errors.Join(errs...)
}

// stillDeletable re-reads the backup before the destructive step: the
// plan is a snapshot, the catalog is the truth. A backup that has left
// Active, gained a hold, become unfinished or left the policy's selection
// since is left alone.
func (e *Enforcer) stillDeletable(ctx context.Context, p *retention.Policy, name string) (bool, string) {
	r, err := e.cfg.Store.Get(ctx, backup.Key(name))
	if err != nil {
		return false, err.Error()
	}
	if r.Phase != catalog.PhaseActive {
		return false, "phase " + string(r.Phase)
	}
	b, err := FromResource(r)
	if err != nil {
		return false, err.Error()
	}
	switch {
	case b.Labels[retention.HoldLabel] == retention.HoldValue:
		return false, "held (" + retention.HoldLabel + "=" + retention.HoldValue + ")"
	case !retention.Finished(b.Phase):
		return false, "unfinished (phase " + b.Phase + ")"
	case !p.Selects(&b):
		return false, "no longer selected"
	}
	return true, ""
}
