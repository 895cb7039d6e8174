package deletion

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/pkg/plugin"
)

// settler receives items whose plugin chain has ended, advances the
// watermark over the contiguous prefix of finished ordinals and writes
// checkpoints. It runs on one goroutine.
type settler struct {
	d        *Deleter
	r        *catalog.Resource
	fence    *catalog.Fence
	progress *catalog.DeletionProgress
	names    []string
	opts     Options
	// unsettled holds every failed or blocked row, by ordinal.
	unsettled map[int64]*catalog.ItemOutcome
	// pending holds finished items at or above the watermark that wait
	// for the items before them.
	pending map[int64]*work

	upsert, settle []catalog.ItemOutcome
	processed      int64
	sinceSave      int
	lastSave       time.Time
	// window is told every watermark advance (it lets the feeder on).
	window *window
	// reader takes back the bodies of the items whose chain has ended.
	reader *archive.Reader
	// spent are the works finished since the caller last emptied it: no
	// one refers to them any more.
	spent []*work
}

func (s *settler) add(ctx context.Context, wk *work) error {
	s.processed++
	// Its chain has ended: only the ordinal and key are needed now, and
	// the body goes back to the reader.
	if s.reader != nil {
		s.reader.Recycle(wk.it)
	}
	wk.it.Object = nil
	if wk.it.Ordinal < s.progress.Watermark {
		s.finish(wk)
	} else {
		if s.pending == nil {
			s.pending = map[int64]*work{}
		}
		s.pending[wk.it.Ordinal] = wk
		for {
			next, ok := s.pending[s.progress.Watermark]
			if !ok {
				break
			}
			delete(s.pending, s.progress.Watermark)
			s.finish(next)
			s.progress.Watermark++
		}
		s.window.advance(s.progress.Watermark)
	}
	if s.opts.Progress != nil && s.processed%512 == 0 {
		s.opts.Progress(Progress{Processed: s.processed, Total: s.progress.TotalItems})
	}
	if s.sinceSave >= s.d.cfg.CheckpointEvery || (s.sinceSave > 0 && time.Since(s.lastSave) >= s.d.cfg.CheckpointInterval) {
		return s.save(ctx, false)
	}
	return nil
}

// finish accounts for an item whose chain has ended.
func (s *settler) finish(wk *work) {
	s.sinceSave++
	for _, so := range wk.settled {
		name := s.names[so.plugin]
		c := s.progress.Counts[name]
		if so.outcome == plugin.OutcomeSkipped {
			c.Skipped++
		} else {
			c.Done++
		}
		s.progress.Counts[name] = c
	}
	if wk.skippedAt != "" {
		c := s.progress.Counts[wk.skippedAt]
		c.Skipped++
		s.progress.Counts[wk.skippedAt] = c
	}
	ord := wk.it.Ordinal
	switch {
	case wk.stop != nil:
		row := *wk.stop
		row.UID = s.r.UID
		row.Attempts = 1
		if wk.prior != nil {
			row.Attempts = wk.prior.Attempts + 1
		}
		row.UpdatedAt = s.d.now()
		if wk.prior != nil && wk.prior.Plugin != row.Plugin {
			// The earlier plugin is done now; its row goes.
			s.settle = append(s.settle, *wk.prior)
			row.Attempts = 1
		}
		s.unsettled[ord] = &row
		s.upsert = append(s.upsert, row)
	case wk.prior != nil:
		delete(s.unsettled, ord)
		s.settle = append(s.settle, *wk.prior)
	}
	s.spent = append(s.spent, wk)
}

// save writes a checkpoint. A final save also reports progress.
func (s *settler) save(ctx context.Context, final bool) error {
	for name, c := range s.progress.Counts {
		c.Failed, c.Blocked = 0, 0
		s.progress.Counts[name] = c
	}
	for _, o := range s.unsettled {
		c := s.progress.Counts[o.Plugin]
		if o.Outcome == "blocked" {
			c.Blocked++
		} else {
			c.Failed++
		}
		s.progress.Counts[o.Plugin] = c
	}
	s.progress.UpdatedAt = s.d.now()
	err := s.d.cfg.Store.SaveCheckpoint(ctx, catalog.Checkpoint{
		Fence: s.fence, Progress: *s.progress, Upsert: s.upsert, Settle: s.settle,
	})
	if err != nil {
		return err
	}
	s.upsert, s.settle, s.sinceSave, s.lastSave = nil, nil, 0, time.Now()
	if final && s.opts.Progress != nil {
		s.opts.Progress(Progress{Processed: s.processed, Total: s.progress.TotalItems})
	}
	return nil
}

func sortedOutcomes(m map[int64]*catalog.ItemOutcome, limit int) []catalog.ItemOutcome {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]catalog.ItemOutcome, 0, min(limit, len(keys)))
	for _, k := range keys[:min(limit, len(keys))] {
		out = append(out, *m[k])
	}
	return out
}

// updateStatus records the deletion's summary and conditions on the backup.
func (d *Deleter) updateStatus(ctx context.Context, r *catalog.Resource, p *catalog.DeletionProgress, unsettled int, lastErr string) {
	for range 3 {
		cur, err := d.cfg.Store.Get(ctx, r.Key())
		if err != nil {
			return
		}
		b, err := backup.FromResource(cur)
		if err != nil {
			return
		}
		now := d.now()
		ds := b.Status.Deletion
		if ds == nil {
			ds = &backup.DeletionStatus{StartedAt: now}
		}
		ds.UpdatedAt, ds.TotalItems, ds.Processed = now, p.TotalItems, p.Watermark
		ds.Counts, ds.Unsettled = p.Counts, int64(unsettled)
		ds.LastError = lastErr
		b.Status.Deletion = ds
		setCondition(cur, backupStuck(ctx, d.cfg.Retry, cur, ds, now))
		if err := b.Encode(); err != nil {
			return
		}
		if _, err := d.cfg.Store.Update(ctx, cur); err == nil {
			return
		}
	}
}

func setCondition(r *catalog.Resource, c catalog.Condition) {
	for i, old := range r.Conditions {
		if old.Type == c.Type {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			r.Conditions[i] = c
			return
		}
	}
	r.Conditions = append(r.Conditions, c)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// matcher decides which plugins want an item. Resource and namespace
// decisions are cached per (resource, namespace); labels are checked per
// item only for plugins that select on labels.
type matcher struct {
	infos []pluginhost.Info
	cache map[string][]int
	key   []byte
}

func newMatcher(infos []pluginhost.Info) *matcher {
	return &matcher{infos: infos, cache: map[string][]int{}}
}

func (m *matcher) match(it *archive.Item) []int {
	// The key is built in a buffer, and the lookup does not copy it.
	m.key = append(append(append(append(append(m.key[:0], it.Resource...), '.'), it.Group...), 0), it.Namespace...)
	cand, ok := m.cache[string(m.key)]
	if !ok {
		key := string(m.key)
		for i, in := range m.infos {
			if in.Matcher == nil || in.Matcher.MatchesResource(it.GroupResource(), it.Resource, it.Namespace) {
				cand = append(cand, i)
			}
		}
		m.cache[key] = cand
	}
	var out []int
	for n, i := range cand {
		mt := m.infos[i].Matcher
		if mt == nil || !mt.HasLabelSelector() || mt.MatchesLabels(it.Labels) {
			if out != nil {
				out = append(out, i)
			}
			continue
		}
		if out == nil {
			out = append(make([]int, 0, len(cand)), cand[:n]...)
		}
	}
	if out == nil {
		return cand
	}
	return out
}

// window bounds reordering: the feeder may run at most size ordinals
// ahead of the watermark, and waits for the settler to move it on.
type window struct {
	size      int64
	watermark atomic.Int64
	moved     chan struct{} // cap 1: the watermark moved
}

func newWindow(watermark, size int64) *window {
	w := &window{size: size, moved: make(chan struct{}, 1)}
	w.watermark.Store(watermark)
	return w
}

// advance publishes the settler's watermark.
func (w *window) advance(watermark int64) {
	if w == nil || w.watermark.Load() == watermark {
		return
	}
	w.watermark.Store(watermark)
	select {
	case w.moved <- struct{}{}:
	default:
	}
}

// wait blocks until ordinal is inside the window; false if ctx ended.
// waiting, when set, is told each time the feeder has to wait.
func (w *window) wait(ctx context.Context, ordinal int64, waiting func(ordinal, watermark int64)) bool {
	for {
		wm := w.watermark.Load()
		if ordinal-wm < w.size {
			return true
		}
		if waiting != nil {
			waiting(ordinal, wm)
		}
		select {
		case <-w.moved:
		case <-ctx.Done():
			return false
		}
	}
}
