package deletion

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/pkg/plugin"
)

// sparePool bounds the spent works kept for the feeder to reuse.
const sparePool = 4096

// work is one item travelling through the plugin stages. Once the settler
// has finished it, nothing else refers to it: it is reused for a later
// item (settler.spent).
type work struct {
	it *archive.Item
	// item is where it is decoded, usually (archive.Reader.NextInto).
	item archive.Item
	// plugins are the indexes (into the sorted plugin list) still to run,
	// in order; next is the position reached.
	plugins []int
	next    int
	// outcomes of settled plugins, for the counters.
	settled []settledOutcome
	// stop is set when a plugin failed or blocked the item: later plugins
	// are not run for it.
	stop *catalog.ItemOutcome
	// prior is the item's existing unsettled row, if any.
	prior *catalog.ItemOutcome
	// skippedAt is the plugin of prior when the deletion skips it
	// (Options.SkipPlugins): the item counts as skipped there.
	skippedAt string
	// settledBuf holds settled for the usual one or two plugins, sparing
	// an allocation per item.
	settledBuf [2]settledOutcome
}

type settledOutcome struct {
	plugin  int
	outcome plugin.Outcome
}

// runPlugins streams the tarball through the plugins. It reports whether
// every item is now settled as done or skipped.
func (d *Deleter) runPlugins(ctx context.Context, b *backup.Backup, sum *archive.Summary, snaps []velero.SnapshotItem, fence *catalog.Fence, rep *Report, opts Options) (bool, error) {
	r := b.Resource
	// The native volume snapshots follow the tarball's items.
	total := sum.Items + int64(len(snaps))
	infos := d.cfg.Plugins.Plugins()
	names := make([]string, len(infos))
	index := make(map[string]int, len(infos))
	for i, in := range infos {
		names[i] = in.Name
		index[in.Name] = i
	}

	progress, priorRows, err := d.cfg.Store.LoadProgress(ctx, r.UID)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		progress = &catalog.DeletionProgress{UID: r.UID, Digest: sum.Digest, Counts: map[string]catalog.OutcomeCount{}}
	case err != nil:
		return false, err
	case progress.Digest != sum.Digest:
		return false, fmt.Errorf("backup %s: the tarball changed since its deletion started (sha256 %s, was %s); refusing to continue",
			r.Name, short(sum.Digest), short(progress.Digest))
	}
	if progress.Counts == nil {
		progress.Counts = map[string]catalog.OutcomeCount{}
	}
	progress.TotalItems = total
	prior := make(map[int64]*catalog.ItemOutcome, len(priorRows))
	for i := range priorRows {
		prior[priorRows[i].Ordinal] = &priorRows[i]
	}

	ar, closeItems, err := d.openItems(ctx, b, sum)
	if err != nil {
		d.noteTarball(ctx, b, err, opts)
		return false, err
	}
	defer closeItems()

	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Open one session per plugin, lazily: a plugin that no item needs is
	// never started.
	pb := pluginBackup(b, d.tarballURL(ctx, b))
	sopts, err := d.sessionOptions(ctx, b, infos)
	if err != nil {
		return false, err
	}
	stages := make([]*stage, len(infos))
	var wg sync.WaitGroup
	first := make(chan *work, 1024)
	in := first
	for i := range infos {
		out := make(chan *work, 1024)
		stages[i] = &stage{d: d, idx: i, name: names[i], backup: pb, opts: sopts, in: in, out: out, fail: cancel}
		wg.Add(1)
		go func() { defer wg.Done(); stages[i].run(pctx) }()
		in = out
	}
	last := in

	// Feed the items. The feeder reads only the starting watermark and
	// the prior rows; the settler owns the live progress, and publishes
	// the watermark for the window: the feeder never runs more than
	// ReorderWindow ordinals ahead of it, so one slow item holds back at
	// most that many finished items in memory.
	startWatermark := progress.Watermark
	win := newWindow(startWatermark, int64(d.cfg.ReorderWindow))
	var readErr error
	feedDone := make(chan struct{})
	// The settler hands back the work of the items it is done with, and
	// their bodies to the reader (see archive.Reader.Recycle): the feeder
	// reads the next items into them.
	spare := make(chan *work, sparePool)
	go func() {
		defer close(feedDone)
		defer close(first)
		matcher := newMatcher(infos)
		var wk *work // reused until it is sent
		var snap int // the next native volume snapshot, after the tarball
		for {
			if wk == nil {
				select {
				case wk = <-spare:
				default:
					wk = new(work)
				}
			}
			var it *archive.Item
			if snap == 0 {
				var err error
				it, err = ar.NextInto(&wk.item)
				if err != nil && err != io.EOF {
					readErr = err
					cancel(err)
					return
				}
				if err == io.EOF {
					snap = 1
				}
			}
			if snap > 0 {
				if snap > len(snaps) {
					return
				}
				wk.item = *backup.SnapshotItem(sum.Items+int64(snap-1), &snaps[snap-1])
				it = &wk.item
				snap++
			}
			*wk = work{it: it, item: wk.item}
			wk.settled = wk.settledBuf[:0]
			p := prior[it.Ordinal]
			switch {
			case it.Ordinal < startWatermark && p == nil:
				ar.Recycle(it)
				continue // settled by an earlier run
			case it.Ordinal < startWatermark:
				wk.prior = p
				idx, ok := index[p.Plugin]
				if _, skipped := opts.skipped[p.Plugin]; !ok && skipped {
					// Its plugin is skipped (--skip-plugin): the item
					// goes on to the plugins after it.
					wk.skippedAt = p.Plugin
					for _, pi := range matcher.match(it) {
						if names[pi] > p.Plugin {
							wk.plugins = append(wk.plugins, pi)
						}
					}
					break
				}
				if !ok {
					// The plugin that must finish this item is gone;
					// keep the row and say so.
					stop := *p
					stop.Message = fmt.Sprintf("plugin %s is not installed: %s", p.Plugin, p.Message)
					wk.stop = &stop
					break
				}
				for _, pi := range matcher.match(it) {
					if pi >= idx {
						wk.plugins = append(wk.plugins, pi)
					}
				}
			default:
				wk.prior = p
				wk.plugins = matcher.match(it)
			}
			if !win.wait(pctx, it.Ordinal, d.hooks.feederWaits) {
				return
			}
			select {
			case first <- wk:
				wk = nil
			case <-pctx.Done():
				return
			}
		}
	}()

	// Settle results in ordinal order.
	s := &settler{
		d: d, r: r, fence: fence, progress: progress, names: names,
		unsettled: maps.Clone(prior), opts: opts, lastSave: time.Now(), window: win,
		reader: ar,
	}
	var sinkErr error
	for wk := range last {
		if sinkErr != nil {
			continue // drain
		}
		ord := wk.it.Ordinal
		err := s.add(ctx, wk)
		if err != nil {
			sinkErr = err
			cancel(err)
		}
		if d.hooks.settled != nil {
			d.hooks.settled(ord)
		}
		// What the settler is done with goes back to the feeder.
		for _, wk := range s.spent {
			select {
			case spare <- wk:
			default:
			}
		}
		clear(s.spent)
		s.spent = s.spent[:0]
	}
	wg.Wait()
	<-feedDone

	// The pass hashed the tarball as it streamed it: the only read of the
	// run. A stream that is not the registered tarball (replaced by an
	// object of the same size, or changed during the run) is refused here,
	// before anything is purged, and the watermark goes back to where the
	// run started, so that no item of the backup is skipped because an
	// item of the other tarball settled its ordinal.
	var digestErr error
	if readErr == nil && sinkErr == nil && pctx.Err() == nil {
		if found := ar.Digest(); found != sum.Digest {
			s.progress.Watermark = min(s.progress.Watermark, startWatermark)
			bl, _ := d.blobsFor(ctx, b)
			where := b.Spec.StorageKey
			if bl != nil {
				where = blobstore.ObjectURL(bl.URL(), where)
			}
			digestErr = fmt.Errorf("backup %s: %w: the tarball read from %s has sha256 %s, not the sha256 %s recorded at registration; "+
				"nothing is purged, and the items sent in this run will be sent again: run the delete again once the registered tarball is back",
				r.Name, ErrTarballReplaced, where, found, sum.Digest)
			d.noteTarball(ctx, b, digestErr, opts)
		}
	}

	// Persist what is settled, whatever happened.
	saveErr := s.save(context.WithoutCancel(ctx), true)
	rep.Counts = progress.Counts
	rep.UnsettledCount = len(s.unsettled)
	rep.Unsettled = append(rep.Unsettled, sortedOutcomes(s.unsettled, maxReportedUnsettled)...)
	if err := cmp.Or(sinkErr, readErr, context.Cause(pctx), digestErr, saveErr); err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return false, fmt.Errorf("%w after %d of %d items; progress is saved, run the delete again to resume", ErrInterrupted, s.processed, total)
		}
		if errors.Is(err, blobstore.ErrDownloadBroken) {
			return false, fmt.Errorf("backup %s: %w: reading its tarball from %s failed after %d of %d items, and resuming the download failed too (%v); "+
				"progress is saved: run `lethe backup delete %s` again to resume", r.Name, ErrInterrupted, d.tarballURL(ctx, b), s.processed, total, oneLine(err), r.Name)
		}
		return false, err
	}
	if progress.Watermark != total {
		return false, fmt.Errorf("backup %s: internal error: %d of %d items settled", r.Name, progress.Watermark, total)
	}
	d.updateStatus(context.WithoutCancel(ctx), r, progress, len(s.unsettled), "")
	return len(s.unsettled) == 0, nil
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

func pluginBackup(b *backup.Backup, tarball string) plugin.Backup {
	r := b.Resource
	pb := plugin.Backup{
		Name: r.Name, UID: r.UID, Labels: r.Labels, Annotations: r.Annotations,
		CreatedAt: r.CreatedAt, StorageLocation: tarball,
	}
	if b.Spec.ExpiresAt != nil {
		pb.ExpiresAt = *b.Spec.ExpiresAt
	}
	if b.Spec.Velero != nil {
		pb.SourceUID = b.Spec.Velero.UID
	}
	if b.Spec.CreatedAt != nil {
		pb.SourceCreatedAt = *b.Spec.CreatedAt
	}
	return pb
}
