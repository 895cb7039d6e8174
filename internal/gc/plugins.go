package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/pkg/plugin"
)

// progressDigest marks the plugin progress of a catalog resource (as
// opposed to a backup tarball's) in the catalog's Progress role.
const progressDigest = "gc"

// Item is the plugin item a catalog resource is: its kind, a plural
// lower-case resource name (Widget → widgets) with no group, its
// namespace, name and labels, and the resource's JSON as the object.
func Item(r *catalog.Resource) (plugin.Item, error) {
	obj, err := json.Marshal(r)
	if err != nil {
		return plugin.Item{}, err
	}
	return plugin.Item{Version: "v1", Resource: Plural(r.Kind), Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, Object: obj}, nil
}

// Plural is the resource name plugins select a kind by: lower case, with
// an English plural (VolumeSnapshot → volumesnapshots, Policy → policies).
func Plural(kind string) string {
	k := strings.ToLower(kind)
	switch {
	case strings.HasSuffix(k, "s"), strings.HasSuffix(k, "x"), strings.HasSuffix(k, "ch"), strings.HasSuffix(k, "sh"):
		return k + "es"
	case strings.HasSuffix(k, "y") && len(k) > 1 && !strings.ContainsRune("aeiou", rune(k[len(k)-2])):
		return k[:len(k)-1] + "ies"
	}
	return k + "s"
}

// selecting returns the plugins, in name order, whose selector takes r.
func (c *Collector) selecting(r *catalog.Resource) []string {
	if c.cfg.Plugins == nil {
		return nil
	}
	it := plugin.Item{Resource: Plural(r.Kind), Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
	var out []string
	for _, p := range c.cfg.Plugins.Plugins() {
		if p.Matcher == nil || p.Matcher.Matches(it, r.Labels) {
			out = append(out, p.Name)
		}
	}
	return out
}

// pluginState is one resource's progress through its plugins.
type pluginState struct {
	r        *catalog.Resource
	item     plugin.Item
	done     map[string]bool
	row      *catalog.ItemOutcome // the unsettled plugin, if any
	settle   []catalog.ItemOutcome
	stopped  bool // an unsettled plugin this run: later plugins wait
	dirty    bool // progress to save
	hadState bool
}

// runPlugins feeds each resource of rs that still has the delete-actions
// finalizer, as one item, to the plugins that select it, in name order,
// one session per plugin for the whole batch. A resource whose plugins
// are all done (or skipped) loses the finalizer (rs is updated in place);
// one that is blocked or failed keeps it, with its outcome row and next
// attempt time saved. A plugin after an unfinished one does not run.
func (c *Collector) runPlugins(ctx context.Context, rs []*catalog.Resource) error {
	now := c.now()
	var states []*pluginState
	for _, r := range rs {
		if r == nil || r.Kind == BackupKind || r.Phase != catalog.PhaseDeleting || !slices.Contains(r.Finalizers, catalog.FinalizerDeleteActions) {
			continue
		}
		st := &pluginState{r: r, done: map[string]bool{}}
		p, rows, err := c.st.LoadProgress(ctx, r.UID)
		switch {
		case errors.Is(err, catalog.ErrNotFound):
		case err != nil:
			return err
		default:
			st.hadState = true
			for name, n := range p.Counts {
				if n.Done+n.Skipped > 0 {
					st.done[name] = true
				}
			}
			if len(rows) > 0 {
				st.row = &rows[0]
			}
		}
		if st.item, err = Item(r); err != nil {
			return err
		}
		states = append(states, st)
	}
	if len(states) == 0 {
		return nil
	}
	if c.cfg.Plugins != nil {
		for _, p := range c.cfg.Plugins.Plugins() {
			var batch []*pluginState
			for _, st := range states {
				if st.stopped || st.done[p.Name] || (p.Matcher != nil && !p.Matcher.Matches(st.item, st.r.Labels)) {
					continue
				}
				if st.row != nil && st.row.Plugin == p.Name && st.row.NextAttemptAt.After(now) {
					st.stopped = true // not due yet
					continue
				}
				batch = append(batch, st)
			}
			if len(batch) == 0 {
				continue
			}
			if err := c.execute(ctx, p.Name, batch, now); err != nil {
				return err
			}
		}
	}
	for i, r := range rs {
		for _, st := range states {
			if st.r != r {
				continue
			}
			finished := !st.stopped
			if st.dirty || (finished && st.hadState) {
				if err := c.saveProgress(ctx, st, finished); err != nil {
					return err
				}
			}
			if !finished {
				continue
			}
			nr, err := c.st.RemoveFinalizer(c.actor(ctx), r.Key(), catalog.FinalizerDeleteActions)
			if err != nil {
				return err
			}
			rs[i] = nr //nolint:gosec // G602: i ranges over rs
		}
	}
	return nil
}

// execute runs one plugin over a batch and records each outcome.
func (c *Collector) execute(ctx context.Context, name string, batch []*pluginState, now time.Time) error {
	s, err := c.cfg.Plugins.Open(ctx, name, plugin.Backup{}, c.cfg.Session)
	if err != nil {
		return fmt.Errorf("plugin %s: %w", name, err)
	}
	defer s.Close()
	sendErr := make(chan error, 1)
	go func() {
		defer s.CloseSend()
		for i, st := range batch {
			if err := s.Send(ctx, pluginhost.Item{ID: uint64(i), Item: st.item}); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	got := 0
	for res := range s.Results() {
		if res.ID >= uint64(len(batch)) {
			continue
		}
		got++
		st := batch[res.ID]
		switch res.Outcome {
		case plugin.OutcomeDone, plugin.OutcomeSkipped:
			st.done[name] = true
			if st.row != nil && st.row.Plugin == name {
				st.settle = append(st.settle, *st.row)
				st.row, st.dirty = nil, true
			}
		default:
			attempts := 1
			if st.row != nil && st.row.Plugin == name {
				attempts = st.row.Attempts + 1
			}
			wait := res.RetryAfter
			outcome := "blocked"
			if res.Outcome != plugin.OutcomeBlocked {
				outcome = "failed"
				wait = c.cfg.Backoff.Next(attempts)
			} else if wait <= 0 {
				wait = c.cfg.Backoff.Next(attempts)
			}
			st.row = &catalog.ItemOutcome{UID: st.r.UID, ItemKey: st.r.Key().String(), Plugin: name, Outcome: outcome,
				Message: res.Message, NextAttemptAt: now.Add(wait), Attempts: attempts, UpdatedAt: now}
			st.stopped, st.dirty = true, true
			c.log.Info("plugin did not finish a resource", "plugin", name, "resource", st.r.Key(), "outcome", outcome, "message", res.Message)
		}
	}
	if err := <-sendErr; err != nil {
		return fmt.Errorf("plugin %s: %w", name, err)
	}
	if got < len(batch) {
		return fmt.Errorf("plugin %s: %d of %d results missing", name, len(batch)-got, len(batch))
	}
	return ctx.Err()
}

// saveProgress writes one resource's plugin progress: the plugins done,
// and its unsettled row (or settles it).
func (c *Collector) saveProgress(ctx context.Context, st *pluginState, finished bool) error {
	counts := map[string]catalog.OutcomeCount{}
	for n := range st.done {
		counts[n] = catalog.OutcomeCount{Done: 1}
	}
	cp := catalog.Checkpoint{Progress: catalog.DeletionProgress{UID: st.r.UID, Digest: progressDigest, TotalItems: 1, Counts: counts, UpdatedAt: c.now()}}
	cp.Settle = st.settle
	if st.row != nil {
		cp.Upsert = []catalog.ItemOutcome{*st.row}
	}
	if finished {
		cp.Progress.Watermark = 1
	}
	return c.st.SaveCheckpoint(ctx, cp)
}
