package deletion

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/pkg/plugin"
)

// pendingItem is a native volume snapshot of a backup whose tarball is
// gone that can still reach its plugins: the snapshot list is a file of
// its own, so the abandon path sends its snapshots (as Velero still
// deletes a backup's snapshots when its tarball is missing) and abandons
// only what could not be sent. Those a prior run settled are left out;
// one a prior run left failed or blocked (prior) goes again, from its
// plugin on.
type pendingItem struct {
	snap  velero.SnapshotItem
	ord   int64
	prior *catalog.ItemOutcome
}

// snapshotsWithoutTarball reads the snapshot list of a backup whose
// tarball is missing or replaced, and returns the snapshots not yet
// settled. A list that cannot be used is reported (problem) and
// abandoned: its snapshots stay counted as never sent. pin is
// loadSnapshots'.
func (d *Deleter) snapshotsWithoutTarball(ctx context.Context, b *backup.Backup, pin bool) (pending []pendingItem, problem error, err error) {
	snaps, serr := d.loadSnapshots(ctx, b, pin)
	if serr != nil {
		if errors.Is(serr, backup.ErrVolumeSnapshotsUnusable) {
			return nil, serr, nil
		}
		return nil, nil, serr
	}
	if len(snaps) == 0 {
		return nil, nil, nil
	}
	var watermark int64
	prior := map[int64]*catalog.ItemOutcome{}
	p, rows, err := d.cfg.Store.LoadProgress(ctx, b.Resource.UID)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
	case err != nil:
		return nil, nil, err
	default:
		watermark = p.Watermark
		for i := range rows {
			prior[rows[i].Ordinal] = &rows[i]
		}
	}
	for i := range snaps {
		ord := b.Spec.Items + int64(i)
		pr := prior[ord]
		if ord < watermark && pr == nil {
			continue // settled by an earlier run
		}
		pending = append(pending, pendingItem{snap: snaps[i], ord: ord, prior: pr})
	}
	return pending, nil, nil
}

// sendSnapshots sends the pending native volume snapshots of a backup
// whose tarball is gone to the plugins that select them, in plugin
// order (an item that fails or is blocked goes no further), and updates
// the report of its forced purge: those settled are no longer abandoned,
// those that reached their plugins are no longer "never sent". Nothing is
// persisted: the backup is purged next, and a run that stops before that
// sends them again.
func (d *Deleter) sendSnapshots(ctx context.Context, b *backup.Backup, pending []pendingItem, rep *Report) error {
	infos := d.cfg.Plugins.Plugins()
	index := make(map[string]int, len(infos))
	for i, in := range infos {
		index[in.Name] = i
	}
	m := newMatcher(infos)
	type state struct {
		plugins []int
		stop    *catalog.ItemOutcome
		// gone: the plugin a prior row waits on is not installed; the
		// item is not sent, and stays abandoned as it was.
		gone bool
	}
	states := make([]state, len(pending))
	for i := range pending {
		pi := &pending[i]
		all := m.match(backup.SnapshotItem(pi.ord, &pi.snap))
		from := 0
		if pi.prior != nil {
			idx, ok := index[pi.prior.Plugin]
			if !ok {
				stop := *pi.prior
				stop.Message = fmt.Sprintf("plugin %s is not installed: %s", pi.prior.Plugin, pi.prior.Message)
				states[i].stop, states[i].gone = &stop, true
				continue
			}
			from = idx
		}
		for _, p := range all {
			if p >= from {
				states[i].plugins = append(states[i].plugins, p)
			}
		}
	}
	if rep.Counts == nil {
		rep.Counts = map[string]catalog.OutcomeCount{}
	}
	var sopts pluginhost.SessionOptions
	var pb plugin.Backup
	opened := false
	for pidx, in := range infos {
		var ids []int
		for i := range states {
			if states[i].stop == nil && slices.Contains(states[i].plugins, pidx) {
				ids = append(ids, i)
			}
		}
		if len(ids) == 0 {
			continue
		}
		if !opened {
			var err error
			if sopts, err = d.sessionOptions(ctx, b, infos); err != nil {
				return err
			}
			pb = pluginBackup(b, d.tarballURL(ctx, b))
			opened = true
		}
		results, err := d.sendAll(ctx, in.Name, pb, sopts, pending, ids)
		if err != nil {
			return err
		}
		c := rep.Counts[in.Name]
		for _, i := range ids {
			res, ok := results[uint64(i)] //nolint:gosec // i counts from 0
			it := backup.SnapshotItem(pending[i].ord, &pending[i].snap)
			switch {
			case !ok:
				states[i].stop = &catalog.ItemOutcome{Ordinal: it.Ordinal, ItemKey: it.Key(), Plugin: in.Name, Outcome: "failed", Message: "no result from the plugin"}
				c.Failed++
			case res.Outcome == plugin.OutcomeDone:
				c.Done++
			case res.Outcome == plugin.OutcomeSkipped:
				c.Skipped++
			default:
				outcome := "failed"
				if res.Outcome == plugin.OutcomeBlocked {
					outcome = "blocked"
					c.Blocked++
				} else {
					c.Failed++
				}
				states[i].stop = &catalog.ItemOutcome{Ordinal: it.Ordinal, ItemKey: it.Key(), Plugin: in.Name, Outcome: outcome, Message: res.Message}
			}
		}
		rep.Counts[in.Name] = c
	}
	// The report: every pending snapshot reached its plugins (or had
	// none, and is settled as in any run) unless the plugin a prior row
	// waits on is gone; those settled are no longer abandoned.
	unsettled := map[int64]catalog.ItemOutcome{}
	for _, o := range rep.Unsettled {
		unsettled[o.Ordinal] = o
	}
	for i := range states {
		if states[i].gone {
			continue
		}
		ord := pending[i].ord
		if len(states[i].plugins) > 0 {
			rep.SnapshotsSent++
		}
		if pending[i].prior == nil {
			rep.NotSent-- // abandonAll counted it as never sent
		}
		if states[i].stop == nil {
			rep.UnsettledCount--
			delete(unsettled, ord)
			continue
		}
		unsettled[ord] = *states[i].stop
	}
	rep.Unsettled = rep.Unsettled[:0]
	for _, k := range slices.Sorted(maps.Keys(unsettled)) {
		if len(rep.Unsettled) == maxReportedUnsettled {
			break
		}
		rep.Unsettled = append(rep.Unsettled, unsettled[k])
	}
	return nil
}

// sendAll sends the pending items ids to one plugin's session and
// returns their results by id.
func (d *Deleter) sendAll(ctx context.Context, name string, pb plugin.Backup, sopts pluginhost.SessionOptions, pending []pendingItem, ids []int) (map[uint64]pluginhost.Result, error) {
	sess, err := d.cfg.Plugins.Open(ctx, name, pb, sopts)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", name, err)
	}
	defer sess.Close()
	results := map[uint64]pluginhost.Result{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for res := range sess.Results() {
			results[res.ID] = res
		}
	}()
	for _, i := range ids {
		it := backup.SnapshotItem(pending[i].ord, &pending[i].snap)
		if err := sess.Send(ctx, pluginhost.Item{ID: uint64(i), Item: plugin.Item{ //nolint:gosec // i counts from 0
			Group: it.Group, Version: it.Version, Resource: it.Resource, Kind: it.Kind,
			Namespace: it.Namespace, Name: it.Name, Object: it.Object,
		}}); err != nil {
			sess.Close()
			<-done
			return nil, fmt.Errorf("plugin %s: %w", name, err)
		}
	}
	sess.CloseSend()
	select {
	case <-done:
	case <-ctx.Done():
		sess.Close()
		<-done
		return nil, context.Cause(ctx)
	}
	return results, nil
}
