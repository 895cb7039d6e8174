package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

// deleteTargets resolves the backups a delete names: NAMEs (each must
// exist), a label selector, or --all. Nothing changes.
func (a *app) deleteTargets(ctx context.Context, names []string, selector string, all bool) ([]string, error) {
	sources := 0
	for _, set := range []bool{len(names) > 0, selector != "", all} {
		if set {
			sources++
		}
	}
	switch {
	case sources == 0:
		return nil, usageError{errors.New("name the backups to delete: NAME..., -l/--selector SELECTOR or --all")}
	case sources > 1:
		return nil, usageError{errors.New("NAME..., --selector and --all cannot be combined: choose one")}
	}
	for _, n := range names {
		if err := backup.ValidateName(n); err != nil {
			return nil, usageError{err}
		}
	}
	st, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	if len(names) > 0 {
		var out []string
		for _, n := range names {
			if slices.Contains(out, n) {
				continue
			}
			if _, err := backup.Get(ctx, st, backup.Key(n)); err != nil {
				return nil, err
			}
			out = append(out, n)
		}
		return out, nil
	}
	rs, err := listAll(ctx, st, catalog.ListOptions{Kind: backup.Kind, LabelSelector: selector})
	if err != nil {
		if selector != "" {
			return nil, usageError{fmt.Errorf("--selector %q: %w", selector, err)}
		}
		return nil, err
	}
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		// A selection leaves out the backups Velero is still writing, as
		// Velero's own --all and --selector do (each request for one is
		// refused, the others go on); a NAME given is refused (exit 5).
		if b, err := backup.FromResource(r); err == nil {
			if phase, unfinished := b.Unfinished(); unfinished {
				fmt.Fprintf(a.s.Err, "left out backup %s: still being written by Velero (phase %s); run `lethe backup sync` once Velero has finished it\n",
					termtext.Quote(r.Name), termtext.Quote(phase))
				continue
			}
		}
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out, nil
}

// backupError prefixes err with the backup's name, unless it names it
// already.
func backupError(name string, err error) error {
	if _, ok := errors.AsType[*deletion.UnfinishedError](err); ok {
		return err
	}
	return fmt.Errorf("backup %s: %w", termtext.Quote(name), err)
}

// deleteMany deletes several backups with one plan and one confirmation:
// every backup is checked and planned before anything changes, and each
// is then deleted in turn; one that fails does not stop the others.
func (a *app) deleteMany(ctx context.Context, del *deletion.Deleter, names []string, opts deletion.Options, dryRun, yes bool, out string) error {
	if !dryRun && !opts.Async {
		for _, n := range names {
			if err := del.Check(ctx, n, opts); err != nil {
				return deleteError(backupError(n, err))
			}
		}
	}
	var plans []*deletion.Plan
	var total int64
	if dryRun || !yes {
		if a.s.InteractiveErr {
			fmt.Fprintf(a.s.Err, "Reading %s to plan their deletion...\n", counted(len(names), "backup", "backups"))
		}
		for _, n := range names {
			p, err := del.Plan(ctx, n, opts)
			if err != nil {
				return deleteError(backupError(n, err))
			}
			plans = append(plans, p)
			total += p.TotalItems
		}
	}
	if dryRun {
		if structured(out) {
			l := []view.DeletionPlan{}
			for _, p := range plans {
				l = append(l, view.DeletionPlan{Kind: view.DeletionPlanKind, Plan: p})
			}
			return printList(a.s.Out, out, view.DeletionPlanKind, l)
		}
		for i, p := range plans {
			if i > 0 {
				fmt.Fprintln(a.s.Out)
			}
			a.printPlan(p)
		}
		return nil
	}
	if !yes {
		var rejected []string
		for _, p := range plans {
			if p.Rejected != "" {
				rejected = append(rejected, termtext.Quote(p.Backup)+": "+termtext.Quote(p.Rejected))
			}
		}
		if len(rejected) > 0 {
			return errors.New("nothing deleted: " + strings.Join(rejected, "; "))
		}
		ok, err := a.confirm(fmt.Sprintf("Delete %s (%s; %s in all)?", counted(len(names), "backup", "backups"), strings.Join(quoteAll(names), ", "), counted(total, "item", "items")))
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintln(a.s.Err, "Nothing deleted.")
			return nil
		}
	}
	var errs []error
	var waiting []string
	incomplete := false
	l := []*view.DeletionReport{}
	for i, n := range names {
		var items int64
		if plans != nil {
			items = plans[i].TotalItems
		}
		bar := a.newProgress(items)
		o := opts
		o.Progress = bar.update
		rep, err := del.Delete(ctx, n, o)
		bar.finish()
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			errs = append(errs, fmt.Errorf("backup %s: %w", termtext.Quote(n), deleteError(err)))
			if structured(out) {
				l = append(l, &view.DeletionReport{Kind: view.DeletionReportKind, Backup: n, Error: err.Error()})
			} else {
				fmt.Fprintf(a.s.Err, "backup %s: %s\n", termtext.Quote(n), termtext.Quote(err.Error()))
			}
			continue
		}
		if structured(out) {
			l = append(l, view.NewDeletionReport(rep))
		} else {
			a.printReport(rep)
			a.printWarnings(rep.Warnings)
		}
		incomplete = incomplete || rep.Result == deletion.ResultIncomplete
		if rep.Result == deletion.ResultWaiting {
			waiting = append(waiting, n)
		}
	}
	// Those waiting on their cascade: the collector runs here, as for
	// one backup (--wait).
	for _, n := range waiting {
		if opts.Async || structured(out) {
			break
		}
		err := a.driveBackup(ctx, n, out)
		if errors.Is(err, errIncomplete) {
			incomplete = true
		} else if err != nil {
			return err
		}
	}
	if structured(out) {
		if err := printList(a.s.Out, out, view.DeletionReportKind, l); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if incomplete {
		return errIncomplete
	}
	return nil
}
