package gc

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/retry"
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

// pluginState is one resource's progress through its plugins. Which
// plugins are done is its progress (the catalog's Progress role); a
// plugin that blocked or failed on it is a row of the retry queue
// (KindResource), which says when it may run again.
type pluginState struct {
	r    *catalog.Resource
	item plugin.Item
	done map[string]bool
	// rows are the queue's rows of its plugins, by plugin.
	rows map[string]*catalog.RetryRow
	// legacy are outcome rows kept in the progress by earlier versions:
	// settled at the next save (the queue holds them now).
	legacy    []catalog.ItemOutcome
	outs      []retry.Outcome         // unfinished this run: recorded in the queue
	succeeded []catalog.RetryIdentity // rows whose plugin is done
	stopped   bool                    // an unsettled plugin: later plugins wait
	dirty     bool                    // progress to save
	hadState  bool
}

// runPlugins feeds each resource of rs that still has the delete-actions
// finalizer, as one item, to the plugins that select it, in name order,
// one session per plugin for the whole batch. A resource whose plugins
// are all done (or skipped) loses the finalizer (rs is updated in place);
// one that is blocked or failed keeps it, and the outcome is an attempt
// of its row in the retry queue, which computes the next attempt (the
// policy of that plugin, never before its retryAfter) and discards the
// row after the maximum attempts. A plugin whose row is not due (or is
// discarded) does not run, nor do the plugins after it: the queue wakes
// the resource when the row is due (see RetryHandler).
func (c *Collector) runPlugins(ctx context.Context, rs []*catalog.Resource) error {
	now := c.now()
	var states []*pluginState
	for _, r := range rs {
		if r == nil || r.Kind == BackupKind || r.Phase != catalog.PhaseDeleting || !slices.Contains(r.Finalizers, catalog.FinalizerDeleteActions) {
			continue
		}
		states = append(states, &pluginState{r: r, done: map[string]bool{}, rows: map[string]*catalog.RetryRow{}})
	}
	if len(states) == 0 {
		return nil
	}
	uids := make([]string, len(states))
	for i, st := range states {
		uids[i] = st.r.UID
	}
	progress, legacies, err := c.st.LoadProgressMany(ctx, uids)
	if err != nil {
		return err
	}
	if len(progress) != len(states) || len(legacies) != len(states) {
		return fmt.Errorf("plugin progress: %d of %d resources read back", min(len(progress), len(legacies)), len(states))
	}
	for i, st := range states {
		if p := progress[i]; p != nil {
			// Only a resource with progress can have rows: the progress
			// is saved before an outcome is recorded.
			st.hadState, st.legacy = true, legacies[i]
			st.dirty = len(st.legacy) > 0
			for name, n := range p.Counts {
				if n.Done+n.Skipped > 0 {
					st.done[name] = true
				}
			}
			rows, err := c.cfg.Retry.List(ctx, catalog.RetryFilter{OwnerUID: st.r.UID, Kind: retry.KindResource})
			if err != nil {
				return err
			}
			for _, row := range rows {
				if st.done[row.Plugin] {
					st.succeeded = append(st.succeeded, row.RetryIdentity) // done before a crash
					continue
				}
				st.rows[row.Plugin] = row
			}
		}
		if st.item, err = Item(st.r); err != nil {
			return err
		}
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
				if row := st.rows[p.Name]; row != nil && !rowDue(row, now) {
					st.stopped = true // not due yet, or a dead letter
					continue
				}
				batch = append(batch, st)
			}
			if len(batch) == 0 {
				continue
			}
			if err := c.execute(ctx, p.Name, batch); err != nil {
				return err
			}
		}
	}
	// The progress first, then the queue: a crash in between loses an
	// attempt at most (the plugin runs again), never a plugin's result.
	var outs []retry.Outcome
	for _, st := range states {
		if st.dirty || (!st.stopped && st.hadState) {
			if err := c.saveProgress(ctx, st, !st.stopped); err != nil {
				return err
			}
		}
		outs = append(outs, st.outs...)
	}
	if _, err := c.cfg.Retry.Record(ctx, outs...); err != nil {
		return err
	}
	// The resources whose plugins are all done lose the finalizer
	// together, in one transaction.
	var finished []catalog.Key
	for _, st := range states {
		if st.stopped {
			// Rows of the plugins done go; the others wait.
			if len(st.succeeded) > 0 {
				if err := c.cfg.Retry.Succeed(ctx, st.r.Key(), st.r.UID, st.succeeded); err != nil {
					return err
				}
			}
			continue
		}
		// Every plugin is done: its rows stay until the purge, which
		// finishes them (DeletionCompleted when one was a dead letter),
		// or until the step finds the resource still waiting on
		// something else (syncRetryRows removes them).
		finished = append(finished, st.r.Key())
	}
	if len(finished) == 0 {
		return nil
	}
	nrs, err := c.st.RemoveFinalizers(c.actor(ctx), finished, catalog.FinalizerDeleteActions)
	if err != nil {
		return err
	}
	if len(nrs) != len(finished) {
		return fmt.Errorf("removing the %s finalizer: %d of %d resources returned", catalog.FinalizerDeleteActions, len(nrs), len(finished))
	}
	after := make(map[catalog.Key]*catalog.Resource, len(nrs))
	for i, nr := range nrs {
		if nr == nil || nr.Key() != finished[i] {
			return fmt.Errorf("removing the %s finalizer: %s came back as another resource", catalog.FinalizerDeleteActions, finished[i])
		}
		after[finished[i]] = nr
	}
	for i, r := range rs {
		if r == nil {
			continue
		}
		if nr, ok := after[r.Key()]; ok && nr.UID == r.UID {
			rs[i] = nr
		}
	}
	return nil
}

// rowDue says whether the plugin of a queue row may run now: the row is
// due, or claimed by the queue's collector to run it; a dead letter
// never runs until an operator requeues it.
func rowDue(row *catalog.RetryRow, now time.Time) bool {
	switch row.State {
	case catalog.RetryDiscarded:
		return false
	case catalog.RetryRunning:
		return true
	}
	return !row.NextAttemptAt.After(now)
}

// execute runs one plugin over a batch and notes each outcome.
func (c *Collector) execute(ctx context.Context, name string, batch []*pluginState) error {
	s, err := c.cfg.Plugins.Open(ctx, name, plugin.Backup{}, c.cfg.Session)
	if err != nil {
		return fmt.Errorf("plugin %s: %w", name, err)
	}
	defer s.Close()
	start := time.Now()
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
			if row := st.rows[name]; row != nil {
				st.succeeded = append(st.succeeded, row.RetryIdentity)
				delete(st.rows, name)
				st.dirty = true
			}
		default:
			outcome, after := "blocked", res.RetryAfter
			if res.Outcome != plugin.OutcomeBlocked {
				outcome, after = "failed", 0
			}
			st.outs = append(st.outs, retry.Outcome{Kind: retry.KindResource, Owner: st.r.Key(), UID: st.r.UID, Plugin: name,
				Result: outcome, Message: res.Message, RetryAfter: after, Duration: time.Since(start)})
			st.stopped, st.dirty = true, true
			c.log.Info("plugin did not finish a resource; it waits in the retry queue", "plugin", name, "resource", st.r.Key(), "outcome", outcome, "message", res.Message)
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

// saveProgress writes one resource's plugin progress: the plugins done
// (outcome rows of earlier versions are settled).
func (c *Collector) saveProgress(ctx context.Context, st *pluginState, finished bool) error {
	counts := map[string]catalog.OutcomeCount{}
	for n := range st.done {
		counts[n] = catalog.OutcomeCount{Done: 1}
	}
	cp := catalog.Checkpoint{Progress: catalog.DeletionProgress{UID: st.r.UID, Digest: progressDigest, TotalItems: 1, Counts: counts, UpdatedAt: c.now()}}
	cp.Settle, st.legacy = st.legacy, nil
	if finished {
		cp.Progress.Watermark = 1
	}
	return c.st.SaveCheckpoint(ctx, cp)
}
