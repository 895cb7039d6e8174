package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

// fileDeleteResult is one resource's outcome of 'lethe delete -f', in the
// schema 'lethe delete KIND NAME' prints for one.
type fileDeleteResult struct {
	Resource catalog.Key `json:"resource"`
	Result   string      `json:"result"`
	Note     string      `json:"note,omitempty"`
}

// filePlansView is delete -f --dry-run -o json|yaml: a CascadePlanList,
// with done, the resources a previous run already purged (resumed).
type filePlansView struct {
	Items []view.Object `json:"items"`
	Done  []view.Object `json:"done,omitempty"`
}

func (a *app) printFilePlans(out string, plans []*gc.Plan, done []*fileDeleteResult) error {
	items, err := view.ToObjects(kindCascadePlan, plans)
	if err != nil {
		return err
	}
	v := filePlansView{Items: items}
	if len(done) > 0 {
		if v.Done, err = view.ToObjects(kindDeletionResult, done); err != nil {
			return err
		}
	}
	return printObject(a.s.Out, out, kindCascadePlan+"List", v)
}

// fileDeleteFlags are the flags of 'lethe delete -f' (and of a delete of
// several names).
type fileDeleteFlags struct{ dryRun, yes, wait, ignoreNotFound bool }

// deleteFiles is 'lethe delete -f': every resource the manifests name,
// last document first (see deleteKeys). A bad file changes nothing.
func (a *app) deleteFiles(ctx context.Context, files []string, opts gc.DeleteOptions, fl fileDeleteFlags, out string) error {
	docs, err := a.loadManifests(files)
	if err != nil {
		return err
	}
	var keys []catalog.Key
	for i := len(docs) - 1; i >= 0; i-- {
		d := docs[i]
		if d.Container != "" {
			continue // a bundle's member goes with its bundle
		}
		k := d.Key()
		if k.Kind == backup.Kind {
			return usageError{fmt.Errorf("%s, document %d: delete backups by name (lethe delete backup %s), not with -f", termtext.Quote(d.Source), d.Index, termtext.Quote(k.Name))}
		}
		keys = append(keys, k)
	}
	return a.deleteKeys(ctx, keys, opts, fl, out)
}

// deleteKeys deletes several resources (delete -f, several names, or -l),
// in the order given, through the collector with the same options. All are
// checked (existence, block references from outside the set) before
// anything changes; one already purged counts as done.
func (a *app) deleteKeys(ctx context.Context, given []catalog.Key, opts gc.DeleteOptions, fl fileDeleteFlags, out string) error {
	dryRun, yes, wait := fl.dryRun, fl.yes, fl.wait
	var keys []catalog.Key
	seen := map[catalog.Key]bool{}
	for _, k := range given {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	st, err := a.catalog(ctx)
	if err != nil {
		return err
	}
	col, err := a.collector(ctx)
	if err != nil {
		return err
	}
	// Check everything first; the plans are the dry run's report.
	plans := make([]*gc.Plan, 0, len(keys))
	uids := map[catalog.Key]string{}
	results := map[catalog.Key]*fileDeleteResult{}
	for _, k := range keys {
		dry := opts
		dry.DryRun = true
		p, err := col.Delete(ctx, k, dry)
		if refusedInside(err, seen) {
			p, err = col.Plan(ctx, k, opts.Propagation)
		}
		if errors.Is(err, catalog.ErrNotFound) {
			// Purged already (an earlier run of the same command, its
			// cascade, or a server): done, not missing. The next run
			// resumes (DESIGN §7.2).
			if ts, terr := st.GetTombstone(ctx, k); terr == nil {
				results[k] = &fileDeleteResult{Resource: k, Result: "purged",
					Note: "already purged at " + ts.PurgedAt.UTC().Format("2006-01-02T15:04:05Z") + " by " + ts.Actor}
				continue
			}
			if fl.ignoreNotFound {
				results[k] = &fileDeleteResult{Resource: k, Result: "not found", Note: "ignored (--ignore-not-found)"}
				continue
			}
		}
		if err != nil {
			return gcError(a.missing(ctx, k, err))
		}
		plans = append(plans, p)
		if r, err := st.Get(ctx, k); err == nil {
			uids[k] = r.UID
		}
	}
	if dryRun {
		var done []*fileDeleteResult
		for _, k := range keys {
			if r := results[k]; r != nil {
				done = append(done, r)
			}
		}
		if structured(out) {
			return a.printFilePlans(out, plans, done)
		}
		for _, r := range done {
			fmt.Fprintf(a.s.Out, "%s: %s\n\n", keyText(r.Resource), termtext.Quote(r.Note))
		}
		for i, p := range plans {
			if i > 0 {
				fmt.Fprintln(a.s.Out)
			}
			if err := a.printGCPlan(p, out); err != nil {
				return err
			}
		}
		return nil
	}
	if !yes {
		n := 0
		for _, p := range plans {
			n += p.Count(gc.ActionDelete)
		}
		ok, err := a.confirm(fmt.Sprintf("Delete the %s the manifests name (%d in all with their cascades)?", counted(len(keys), "resource", "resources"), n))
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintln(a.s.Err, "Nothing deleted.")
			return nil
		}
	}
	var drive []catalog.Key
	// A resource held by a block reference from another one of the set
	// waits until that one is Deleting: passes until nothing is left.
	var pending []catalog.Key
	for _, k := range keys {
		if results[k] == nil {
			pending = append(pending, k)
		}
	}
	for len(pending) > 0 {
		var left []catalog.Key
		var lastErr error
		for _, k := range pending {
			o := opts
			o.UID = uids[k]
			p, err := col.Delete(ctx, k, o)
			var re *gc.RecreatedError
			switch {
			case errors.As(err, &re):
				// The one checked is gone; the new one is not deleted.
				results[k] = &fileDeleteResult{Resource: k, Result: "purged", Note: recreatedNote(re.NewUID)}
				continue
			case refusedInside(err, seen):
				left, lastErr = append(left, k), err
				continue
			case errors.Is(err, catalog.ErrNotFound):
				// Purged by the cascade of one deleted before it, or
				// meanwhile by another process.
				results[k] = &fileDeleteResult{Resource: k, Result: "purged"}
				continue
			case err != nil:
				return gcError(fmt.Errorf("%w (%d of %d requested before it)", err, len(results), len(keys)))
			}
			switch {
			case p.ScheduledUntil != nil:
				results[k] = &fileDeleteResult{Resource: k, Result: "scheduled",
					Note: "in its grace window until " + p.ScheduledUntil.UTC().Format("2006-01-02T15:04:05Z")}
			case wait:
				drive = append(drive, k)
			default:
				results[k] = &fileDeleteResult{Resource: k, Result: "requested", Note: "lethe server carries it out"}
			}
		}
		if len(left) == len(pending) {
			return gcError(lastErr) // block references among themselves: a cycle
		}
		pending = left
	}
	stuck := false
	for _, k := range drive {
		res, err := col.Drive(ctx, k, gc.DriveOptions{UID: uids[k]})
		if err != nil {
			return err
		}
		switch res {
		case gc.OutcomeStuck:
			stuck = true
			results[k] = &fileDeleteResult{Resource: k, Result: "stuck", Note: retry.ExplainCommand(k) + " says why"}
		case gc.OutcomeRecreated:
			note := "a new resource of the same name was created meanwhile; it is left alone"
			if r, err := st.Get(ctx, k); err == nil {
				note = recreatedNote(r.UID)
			}
			results[k] = &fileDeleteResult{Resource: k, Result: "purged", Note: note}
		default:
			results[k] = &fileDeleteResult{Resource: k, Result: "purged"}
		}
	}
	list := make([]*fileDeleteResult, 0, len(keys))
	for _, k := range keys {
		list = append(list, results[k])
	}
	if structured(out) {
		if err := printList(a.s.Out, out, kindDeletionResult, list); err != nil {
			return err
		}
	} else {
		for _, r := range list {
			line := keyText(r.Resource) + ": " + r.Result
			if r.Note != "" {
				line += "; " + termtext.Quote(r.Note)
			}
			fmt.Fprintln(a.s.Out, line)
		}
	}
	if stuck {
		return errIncomplete
	}
	return nil
}

// refusedInside: err is a block refusal whose referrers are all in set.
func refusedInside(err error, set map[catalog.Key]bool) bool {
	var refused *gc.RefusedError
	if !errors.As(err, &refused) {
		return false
	}
	for _, k := range refused.Referrers {
		if !set[k] {
			return false
		}
	}
	return true
}

// loadManifests reads the documents of every -f FILE|DIR|- in order; stdin
// may be named once.
func (a *app) loadManifests(files []string) ([]*manifest.Document, error) {
	if err := stdinOnce(files); err != nil {
		return nil, err
	}
	var docs []*manifest.Document
	for _, f := range files {
		ds, err := manifest.Load(f, a.s.In, manifest.DefaultLimits)
		if err != nil {
			return nil, err
		}
		docs = append(docs, ds...)
	}
	return docs, nil
}

// loadPacked is loadManifests, packed (manifest.Packed): what apply reads.
func (a *app) loadPacked(files []string) (*manifest.Packed, error) {
	if err := stdinOnce(files); err != nil {
		return nil, err
	}
	docs := &manifest.Packed{}
	for _, f := range files {
		if err := docs.Load(f, a.s.In, manifest.DefaultLimits); err != nil {
			return nil, err
		}
	}
	return docs, nil
}

// stdinOnce refuses "-" (stdin) named more than once.
func stdinOnce(files []string) error {
	stdin := 0
	for _, f := range files {
		if f == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return usageError{errors.New("-f - (stdin) may be given once")}
	}
	return nil
}
