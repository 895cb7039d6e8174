package deletion

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// Options tune one deletion request.
//
// The acting user is not an option: it travels in ctx (catalog.WithActor),
// "cli" when ctx names none for a request or an undelete, "lethe" for the
// finalizer removal and purge of a run.
type Options struct {
	Reason string
	// Force skips the grace window.
	Force bool
	// OnlyIfScheduled moves the backup on only if it is Scheduled when the
	// write happens (the grace-window timer): an undeleted backup stays.
	OnlyIfScheduled bool
	// Unattended marks a request of the daemon (TTL expiry, the end of a
	// grace window, a queued deletion it runs): a missing or replaced tarball does not stop it. The
	// backup moves on as asked, and its deletion waits, parked with the
	// TarballMissing or TarballReplaced condition, for an operator: the
	// problem is raised once instead of on every retry.
	Unattended bool
	// ForcePurge purges the backup even if items are still failed or
	// blocked after this run, were at a skipped plugin, or if its tarball
	// is missing or replaced so that no plugin can run: the operator's
	// explicit way past unfinished plugin actions (the abandon path),
	// audited as a force-purge with every item not settled and the skipped
	// plugins. The CLI sets it only for --abandon; --force never implies it.
	ForcePurge bool
	// SkipPlugins are plugins gone for good that this deletion runs
	// without (see CheckPlugins): plugins the backup expects, or plugins
	// installed after its registration, and removed since, at which items
	// are failed or blocked. Their items are abandoned, so it needs
	// ForcePurge to purge.
	SkipPlugins []string
	// skipped are the plugins of SkipPlugins, with the items each would
	// have received, as checkPlugins found them at the start of a run.
	skipped map[string]backup.ExpectedPlugin
	// NoPlugins says that running with no plugin installed at all is
	// intended; audited on the purge.
	NoPlugins bool
	// Delay, when set, overrides the backup's deletion-delay annotation
	// and DefaultDelay.
	Delay        *time.Duration
	DefaultDelay time.Duration
	// Async only requests the deletion: the backup moves to Deleting (or
	// Scheduled) and a work item is queued for the daemon.
	Async bool
	// Progress, when set, is called as items settle.
	Progress func(Progress)
	// Propagation is what happens to the backup's dependents (resources
	// whose owner it is): Foreground (the default) purges the backup only
	// once no dependent with blockOwnerDeletion remains; Background and
	// Orphan do not wait for them (see Held). The garbage collector
	// (internal/gc) carries the cascade out.
	Propagation catalog.Propagation
}

// Delete requests the deletion of the named backup and, unless it is
// scheduled or Async is set, runs it to the end.
//
// The tarball is validated before anything changes: a hostile or corrupt
// tarball returns an error and leaves the backup as it was.
func (d *Deleter) Delete(ctx context.Context, name string, opts Options) (*Report, error) {
	b, err := d.get(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := checkFinished(b); err != nil {
		return nil, err
	}
	if err := d.checkWritable(b); err != nil {
		return nil, err
	}
	if err := d.checkBlocked(ctx, b.Resource, opts); err != nil {
		return nil, err
	}
	if _, err := d.startCheck(ctx, b, opts); err != nil {
		return nil, err
	}
	if b.Resource.Phase != catalog.PhaseDeleting {
		_, err := d.validate(ctx, b)
		d.noteTarball(ctx, b, err, opts)
		// A tarball that is missing or replaced stops everything but the
		// abandon path, which purges without plugins (see run), and the
		// daemon, whose deletion then waits for an operator.
		if err != nil && !((opts.ForcePurge || opts.Unattended) && tarballUnusable(err)) {
			return nil, err
		}
		// So is a list of native volume snapshots that cannot be used
		// (the abandon path goes on without it).
		if err == nil && !opts.ForcePurge {
			if _, err := d.loadSnapshots(ctx, b, false); err != nil {
				return nil, err
			}
		}
	}
	// Another process may move the backup between our read and our write
	// (two deletes started together): the catalog refuses the stale
	// transition, and we look again.
	var queued bool
	for attempt := 1; ; attempt++ {
		rep, q, err := d.request(ctx, b, opts)
		if errors.Is(err, catalog.ErrInvalidTransition) && attempt < 3 {
			if b, err = d.get(ctx, name); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil || rep != nil {
			return rep, err
		}
		queued = q
		break
	}
	// A backup that was Deleting already (a deletion resumed) may have no
	// work item: queue one, without the leader's fence. Queueing is
	// idempotent, and a deletion runs only for a Deleting backup. A
	// request that moved the backup to Deleting queued its work item in
	// the same transaction.
	if !queued {
		qctx := catalog.WithLeaderFence(ctx, nil)
		if _, err := d.cfg.Store.Enqueue(qctx, catalog.WorkItem{Queue: Queue, Key: b.Resource.UID, RunAt: d.now()}); err != nil {
			return nil, err
		}
	}
	if opts.Async {
		return &Report{Backup: name, Result: ResultQueued}, nil
	}
	return d.Run(ctx, name, opts)
}

// request moves the backup on: to Scheduled when it has a grace window
// (the returned report says so), or to Deleting (nil report: run it),
// queueing its work item in the same write (queued).
func (d *Deleter) request(ctx context.Context, b *backup.Backup, opts Options) (_ *Report, queued bool, _ error) {
	r := b.Resource
	ctx = catalog.WithDefaultActor(ctx, "cli")
	reason := cmp.Or(opts.Reason, "deletion requested")
	if opts.NoPlugins && len(d.cfg.Plugins.Plugins()) == 0 {
		reason += " with --no-plugins: no plugin is installed"
	}
	if opts.OnlyIfScheduled && r.Phase != catalog.PhaseScheduled {
		return &Report{Backup: r.Name, Result: ResultNotScheduled}, false, nil
	}
	switch r.Phase {
	case catalog.PhaseDeleting:
		return nil, false, nil
	case catalog.PhaseActive:
		var delay time.Duration
		if opts.Delay != nil {
			delay = *opts.Delay
		} else {
			var err error
			if delay, err = backup.DeletionDelay(r, opts.DefaultDelay); err != nil {
				return nil, false, err
			}
		}
		if delay > 0 && !opts.Force {
			r, err := d.cfg.Store.Schedule(ctx, r.Key(), catalog.ScheduleOptions{Delay: delay, Propagation: opts.Propagation, Reason: reason})
			if err != nil {
				return nil, false, err
			}
			return &Report{Backup: r.Name, Result: ResultScheduled, DueAt: *r.DeletionDueAt}, false, nil
		}
	case catalog.PhaseScheduled:
		if !opts.Force && r.DeletionDueAt != nil && d.now().Before(*r.DeletionDueAt) {
			return &Report{Backup: r.Name, Result: ResultScheduled, DueAt: *r.DeletionDueAt}, false, nil
		}
	}
	// The cascade finalizer holds the record until its dependents and
	// referrers are handled (see Held): the same finalizers as the
	// collector gives a Backup it moves to Deleting.
	_, err := d.cfg.Store.Delete(ctx, r.Key(), catalog.DeleteOptions{
		Finalizers: Finalizers, Force: opts.Force, OnlyIfScheduled: opts.OnlyIfScheduled,
		Propagation: opts.Propagation, Reason: reason, Enqueue: Queue,
	})
	return nil, err == nil, err
}

// Finalizers are the finalizers a backup gets when it enters Deleting:
// the pipeline's own (its items), and the cascade's (its dependents and
// referrers, carried out by the garbage collector).
var Finalizers = []string{catalog.FinalizerDeleteActions, catalog.FinalizerCascade}
