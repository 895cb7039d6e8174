package deletion

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// planSamples is how many sample items a plan shows per plugin.
const planSamples = 3

// Plan is what a deletion would do; computing it changes nothing.
type Plan struct {
	Backup string        `json:"backup"`
	Phase  catalog.Phase `json:"phase"`
	// Rejected is set when the deletion would stop before any plugin
	// runs and change nothing: the tarball would be rejected, or its
	// storage location cannot be used.
	Rejected string `json:"rejected,omitempty"`
	// Abandon is set when the deletion would purge the backup with items
	// not settled (Options.ForcePurge, the abandon path).
	Abandon *AbandonPlan `json:"abandon,omitempty"`
	// DueAt is set when the deletion would be scheduled, not run now.
	DueAt *time.Time `json:"dueAt,omitempty"`
	// TotalItems counts every item: the tarball's, then the native
	// volume snapshots (VolumeSnapshots of them).
	TotalItems      int64        `json:"totalItems"`
	VolumeSnapshots int64        `json:"volumeSnapshots,omitempty"`
	Plugins         []PluginPlan `json:"plugins"`
	// Unmatched counts items that no plugin wants.
	Unmatched int64 `json:"unmatched"`
	// AlreadySettled counts items settled by an earlier, interrupted run.
	AlreadySettled int64 `json:"alreadySettled"`
	// Purge lists what is purged once every item is done or skipped.
	Purge []string `json:"purge"`
	// Skipped are the plugins --skip-plugin skips, with the items each
	// would have received; those items are abandoned.
	Skipped map[string]backup.ExpectedPlugin `json:"skipped,omitempty"`
	// Warnings name the plugins that would see the backup's items
	// although they were not installed when it was registered, and the
	// binaries the plugin lock file does not list (they see none).
	Warnings []string `json:"warnings,omitempty"`
}

// AbandonPlan is what a forced purge would leave behind.
type AbandonPlan struct {
	// Tarball is "missing" or "replaced" when no plugin can run (the
	// backup is purged at once); empty when the tarball is usable and
	// the failed or blocked items are retried once first.
	Tarball string `json:"tarball,omitempty"`
	// TarballError is the problem, in full, when Tarball is set.
	TarballError string `json:"tarballError,omitempty"`
	// VolumeSnapshotsError is set when the list of native volume
	// snapshots is unusable: the snapshots it recorded are abandoned
	// (counted in NotSent).
	VolumeSnapshotsError string `json:"volumeSnapshotsError,omitempty"`
	// Items counts every item not settled as done or skipped now.
	Items int64 `json:"items"`
	// FailedOrBlocked counts the items an earlier run left failed or
	// blocked; NotSent those that would never reach a plugin.
	FailedOrBlocked int64 `json:"failedOrBlocked"`
	NotSent         int64 `json:"notSent"`
	// VolumeSnapshotsSent counts the native volume snapshots sent to
	// their plugins although the tarball is missing or replaced (their
	// list is a file of its own); they are not counted in Items, and are
	// abandoned only if their plugin fails or blocks them.
	VolumeSnapshotsSent int64 `json:"volumeSnapshotsSent,omitempty"`
}

// PluginPlan is one plugin's share of a plan.
type PluginPlan struct {
	Plugin   string   `json:"plugin"`
	Selector string   `json:"selector"`
	Items    int64    `json:"items"`
	Samples  []string `json:"samples,omitempty"`
}

// Plan computes, without changing anything, what deleting the backup
// would do: which items each plugin would receive, what would be purged,
// and whether the tarball would be rejected.
func (d *Deleter) Plan(ctx context.Context, name string, opts Options) (*Plan, error) {
	b, err := d.get(ctx, name)
	if err != nil {
		return nil, err
	}
	r := b.Resource
	infos := d.cfg.Plugins.Plugins()
	p := &Plan{Backup: name, Phase: r.Phase, Plugins: make([]PluginPlan, len(infos))}
	for i, in := range infos {
		p.Plugins[i] = PluginPlan{Plugin: in.Name, Selector: in.Selector.String()}
	}
	p.Purge = []string{
		"tarball " + d.tarballURL(ctx, b),
		"catalog record " + r.Key().String() + " (a tombstone and the audit log remain)",
	}
	if f := planFolder(b); f != "" {
		p.Purge[0] += ", and " + f
	}
	if r.Phase == catalog.PhaseActive && !opts.Force {
		var delay time.Duration
		if opts.Delay != nil {
			delay = *opts.Delay
		} else if delay, err = backup.DeletionDelay(r, opts.DefaultDelay); err != nil {
			return nil, err
		}
		if delay > 0 {
			due := d.now().Add(delay)
			p.DueAt = &due
		}
	} else if r.Phase == catalog.PhaseScheduled && !opts.Force && r.DeletionDueAt != nil && d.now().Before(*r.DeletionDueAt) {
		p.DueAt = r.DeletionDueAt
	}

	if err := checkFinished(b); err != nil {
		p.Rejected = err.Error()
		return p, nil
	}
	if err := d.checkWritable(b); err != nil {
		p.Rejected = err.Error()
		return p, nil
	}
	skipped, err := d.startCheck(ctx, b, opts)
	if err != nil {
		p.Rejected = err.Error()
		return p, nil
	}
	if len(skipped) > 0 {
		p.Skipped = skipped
	}
	sum, err := d.validate(ctx, b)
	if tarballUnusable(err) && opts.ForcePurge {
		// The abandon path: no plugin can run, and the backup is purged
		// with every item not settled.
		// The native volume snapshots, listed in a file of their own,
		// are still sent to their plugins.
		pending, problem, perr := d.snapshotsWithoutTarball(ctx, b, false)
		if perr != nil {
			return nil, perr
		}
		rep := &Report{}
		if aerr := d.abandonAll(ctx, b, rep, err); aerr != nil {
			return nil, aerr
		}
		p.TotalItems = rep.TotalItems
		p.VolumeSnapshots = recordedSnapshots(b)
		p.Abandon = &AbandonPlan{
			Tarball: rep.TarballProblem, TarballError: err.Error(), Items: int64(rep.UnsettledCount),
			FailedOrBlocked: int64(rep.UnsettledCount) - rep.NotSent, NotSent: rep.NotSent,
		}
		if problem != nil {
			p.Abandon.VolumeSnapshotsError = problem.Error()
		}
		m := newMatcher(infos)
		for i := range pending {
			pi := &pending[i]
			if pi.prior == nil {
				p.Abandon.NotSent--
			} else {
				p.Abandon.FailedOrBlocked--
			}
			p.Abandon.Items--
			it := backup.SnapshotItem(pi.ord, &pi.snap)
			matched := m.match(it)
			if len(matched) > 0 {
				p.Abandon.VolumeSnapshotsSent++
			}
			for _, idx := range matched {
				pp := &p.Plugins[idx]
				pp.Items++
				if len(pp.Samples) < planSamples {
					pp.Samples = append(pp.Samples, it.Key())
				}
			}
		}
		p.AlreadySettled = rep.TotalItems - int64(rep.UnsettledCount)
		p.Warnings = d.pluginWarnings(b, p.itemsByPlugin(), "would receive")
		return p, nil
	}
	if err != nil {
		p.Rejected = err.Error()
		return p, nil
	}
	p.TotalItems = sum.Items
	var watermark int64
	prior := map[int64]bool{}
	if prog, rows, err := d.cfg.Store.LoadProgress(ctx, r.UID); err == nil && prog.Digest == sum.Digest {
		watermark = prog.Watermark
		for _, row := range rows {
			prior[row.Ordinal] = true
		}
		if opts.ForcePurge && len(rows) > 0 {
			p.Abandon = &AbandonPlan{Items: int64(len(rows)), FailedOrBlocked: int64(len(rows))}
		}
	} else if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return nil, err
	}
	if opts.ForcePurge && p.Abandon == nil {
		p.Abandon = &AbandonPlan{}
	}
	snaps, serr := d.loadSnapshots(ctx, b, false)
	switch {
	case serr != nil && opts.ForcePurge && errors.Is(serr, backup.ErrVolumeSnapshotsUnusable):
		n := recordedSnapshots(b)
		p.TotalItems += n
		p.VolumeSnapshots = n
		p.Abandon.VolumeSnapshotsError = serr.Error()
		p.Abandon.Items += n
		p.Abandon.NotSent += n
	case serr != nil:
		p.Rejected = serr.Error()
		return p, nil
	}
	p.TotalItems += int64(len(snaps))
	p.VolumeSnapshots += int64(len(snaps))

	ar, closeItems, err := d.openItems(ctx, b, sum)
	if err != nil {
		p.Rejected = err.Error()
		return p, nil
	}
	defer closeItems()
	m := newMatcher(infos)
	count := func(it *archive.Item) { p.countItem(m, it, watermark, prior) }
	for {
		it, err := ar.Next()
		if err == io.EOF {
			// The plan's one read hashed the tarball as it went.
			if found := ar.Digest(); found != sum.Digest {
				p.Rejected = d.replaced(b, b.Spec.StorageKey, found).Error()
			}
			break
		}
		if err != nil {
			p.Rejected = err.Error()
			return p, nil
		}
		count(it)
	}
	// The native volume snapshots follow the tarball's items.
	for i := range snaps {
		count(backup.SnapshotItem(sum.Items+int64(i), &snaps[i]))
	}
	p.Warnings = d.pluginWarnings(b, p.itemsByPlugin(), "would receive")
	if n := unselectedSnapshots(infos, sum.Items, snaps); n > 0 {
		p.Warnings = append(p.Warnings, snapshotsWarning(n, "would go to"))
	}
	return p, nil
}

// itemsByPlugin counts the plan's items by plugin.
func (p *Plan) itemsByPlugin() map[string]int64 {
	out := make(map[string]int64, len(p.Plugins))
	for _, pp := range p.Plugins {
		out[pp.Plugin] = pp.Items
	}
	return out
}

// countItem accounts for one item in a plan.
func (p *Plan) countItem(m *matcher, it *archive.Item, watermark int64, prior map[int64]bool) {
	if it.Ordinal < watermark && !prior[it.Ordinal] {
		p.AlreadySettled++
		return
	}
	idx := m.match(it)
	if len(idx) == 0 {
		p.Unmatched++
	}
	for _, i := range idx {
		pp := &p.Plugins[i]
		pp.Items++
		if len(pp.Samples) < planSamples {
			pp.Samples = append(pp.Samples, it.Key())
		}
	}
}
