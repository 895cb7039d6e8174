package deletion

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// planSamples is how many sample items a plan shows per plugin.
const planSamples = 3

// Plan is what a deletion would do; computing it changes nothing.
type Plan struct {
	Backup string        `json:"backup"`
	Phase  catalog.Phase `json:"phase"`
	// Rejected is set when the tarball would be rejected: the deletion
	// would stop before any plugin runs.
	Rejected string `json:"rejected,omitempty"`
	// DueAt is set when the deletion would be scheduled, not run now.
	DueAt      *time.Time   `json:"dueAt,omitempty"`
	TotalItems int64        `json:"totalItems"`
	Plugins    []PluginPlan `json:"plugins"`
	// Unmatched counts items that no plugin wants.
	Unmatched int64 `json:"unmatched"`
	// AlreadySettled counts items settled by an earlier, interrupted run.
	AlreadySettled int64 `json:"alreadySettled"`
	// Purge lists what is purged once every item is done or skipped.
	Purge []string `json:"purge"`
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
		"tarball " + d.cfg.Blobs.URL() + "/" + b.Spec.StorageKey,
		"catalog record " + r.Key().String() + " (a tombstone and the audit log remain)",
	}
	if r.Phase == catalog.PhaseActive && !opts.Force {
		delay := opts.DefaultDelay
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

	sum, err := d.validate(ctx, b)
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
	} else if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return nil, err
	}

	ar, closeItems, err := d.openItems(ctx, b, sum)
	if err != nil {
		p.Rejected = err.Error()
		return p, nil
	}
	defer closeItems()
	m := newMatcher(infos)
	for {
		it, err := ar.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			p.Rejected = err.Error()
			return p, nil
		}
		if it.Ordinal < watermark && !prior[it.Ordinal] {
			p.AlreadySettled++
			continue
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
	return p, nil
}
