package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

func newBackupDeleteCmd(a *app) *cobra.Command {
	var dryRun, yes, force, abandon, noPlugins, async, wait bool
	var delay, selector, cascade string
	var skipPlugins []string
	var all bool
	c := &cobra.Command{
		Use:   "delete NAME... | -l SELECTOR | --all",
		Short: "Delete backups: run their plugins, then purge what storage holds for them and the record",
		Long: `Delete runs every matching plugin on every item of the backup's tarball, in
alphanumeric order of the plugins' names, and purges the tarball and the
catalog record only when every item is done or skipped. The purge removes
every file of the backup's folder backups/NAME/ in the storage (Velero's
velero-backup.json first, so that Velero's own sync cannot bring the backup
back, then the tarball, the logs and the other files Velero wrote).

Several backups can be deleted at once, as with 'velero backup delete': name
them, or select them with -l/--selector, or take every backup with --all.
Each is checked and planned first, one confirmation covers them all, and
then each is deleted in turn; one that fails does not stop the others.
-l and --all leave out, with a line on stderr, a backup Velero is still
writing (as Velero's own --all and --selector do); a NAME given is refused.
--confirm is the same as --yes.

If the backup has a grace window (--deletion-delay at create, the annotation
lethe.io/deletion-delay, or --deletion-delay here), the deletion is only
scheduled; 'lethe backup undelete NAME' cancels it until the window ends.
--force skips the wait, and does nothing else.

A deletion refuses to start, and changes nothing, when a plugin the backup
expects (recorded at create or sync) is not installed or cannot start, or
when no plugin is installed at all. Install the plugins; or say
--no-plugins when an empty plugin folder is intended; or, for a plugin gone
for good, --skip-plugin NAME --abandon. --skip-plugin also takes a plugin
installed after the backup's registration and removed since, whose failed
or blocked items it skips. Plugins that will see the backup's items
although they were not installed when it was registered, and binaries
the plugin lock file does not list, are named in a warning.

A backup takes part in the garbage collector's graph: it can own resources
(a VolumeSnapshot with an ownerReference to it) and be the target of
references. --cascade says what happens to its dependents, as for
'lethe delete': foreground (the default) purges the backup only once no
dependent with blockOwnerDeletion remains (the collector deletes them; the
backup waits in Deleting, and 'lethe explain backup NAME' says on what);
background purges it without waiting for them; orphan leaves them, without
the owner edge. A block reference to the backup holds its purge too. With
--wait the collector runs here until the cascade is done or stuck (exit 3).

If an item fails or is blocked, the backup stays, with its progress in
'lethe backup get NAME'. Running delete again resumes: only the items that
are not done yet are sent again. An interrupted deletion (Ctrl-C, a crash)
resumes the same way. If an item can never succeed, --abandon retries it
once and then purges the backup anyway: whatever it created outside may be
left behind. --abandon asks for the backup's name to be typed on a
terminal, and needs --yes without one; neither --yes nor --force implies
it. The abandoned items and plugins are recorded in the audit log.

Exit codes: 0 purged or scheduled, 1 error, 2 bad usage, 3 some items are
failed or blocked, or its cascade is stuck (the backup stays), 4 no such
backup (or it was purged), 5 refused: an expected plugin is missing or no
plugin is installed, or live resources hold block references to the backup
(nothing changed), 130 interrupted (progress is saved).`,
		Example: `  # See what would happen, then do it
  lethe backup delete nightly-0412 --dry-run
  lethe backup delete nightly-0412 --yes

  # Several at once, by name, by label or all of them (one confirmation)
  lethe backup delete nightly-0412 nightly-0413
  lethe backup delete -l app=shop --dry-run
  lethe backup delete --all --confirm

  # Skip the grace window
  lethe backup delete nightly-0412 --yes --force

  # Give up on items that can never succeed (types the name to confirm)
  lethe backup delete nightly-0412 --abandon

  # A plugin is gone for good: abandon the items it would have received
  lethe backup delete nightly-0412 --skip-plugin example.com/ebs-snapshots --abandon --yes

  # Keep the VolumeSnapshots it owns (they lose the owner edge)
  lethe backup delete nightly-0412 --cascade=orphan --dry-run

  # Let the daemon (lethe server) do the work
  lethe backup delete nightly-0412 --yes --async`,
	}
	out := outputFlag(c, "table")
	f := c.Flags()
	f.BoolVar(&dryRun, "dry-run", false, "print the plan (items per plugin, samples, what is purged) and change nothing")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (with --abandon: required without a terminal)")
	f.BoolVar(&yes, "confirm", false, "the same as --yes (Velero's spelling)")
	f.StringVarP(&selector, "selector", "l", "", "delete the backups with these labels, e.g. app=shop,env!=dev")
	f.BoolVar(&all, "all", false, "delete every backup in the catalog")
	f.BoolVar(&force, "force", false, "skip the grace window and delete now; nothing else")
	f.BoolVar(&abandon, "abandon", false, "purge even if items are still failed or blocked after this run, or at a skipped plugin: they are abandoned (audited)")
	f.StringArrayVar(&skipPlugins, "skip-plugin", nil, "run without this expected plugin, gone for good; its items are abandoned, so it needs --abandon (repeatable)")
	f.BoolVar(&noPlugins, "no-plugins", false, "allow the deletion with no plugin installed at all (audited)")
	f.StringVar(&delay, "deletion-delay", "", "grace window for this deletion, e.g. 24h (overrides the annotation and --default-deletion-delay)")
	f.BoolVar(&wait, "wait", true, "wait for the deletion to finish, with progress")
	f.BoolVar(&async, "async", false, "only request the deletion; 'lethe server' runs it")
	f.StringVar(&cascade, "cascade", "foreground", "what happens to the resources the backup owns: foreground (wait for those with blockOwnerDeletion), background or orphan")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		if len(skipPlugins) > 0 && !abandon {
			return usageError{errors.New("--skip-plugin abandons the items that plugin would have received, so it needs --abandon")}
		}
		if abandon && !dryRun && !yes && !a.s.InteractiveIn {
			return usageError{errors.New("--abandon without a terminal needs --yes: the abandoned items' outside work may be left behind")}
		}
		prop, err := gc.ParsePropagation(cascade)
		if err != nil {
			return usageError{fmt.Errorf("--cascade: %w", err)}
		}
		ctx := cmd.Context()
		if err := a.init(); err != nil {
			return err
		}
		opts := deletion.Options{
			Force: force, ForcePurge: abandon, SkipPlugins: skipPlugins, NoPlugins: noPlugins,
			Async: async || !wait, DefaultDelay: a.g.defaultDelayD, Propagation: catalog.Propagation(prop),
		}
		if delay != "" {
			d, err := backup.ParseDuration(delay)
			if err != nil {
				return usageError{fmt.Errorf("--deletion-delay: %w", err)}
			}
			opts.Delay = &d
		}
		names, err := a.deleteTargets(ctx, args, selector, all)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			fmt.Fprintln(a.s.Err, "No backup matches; nothing deleted.")
			if structured(*out) && dryRun {
				return printList(a.s.Out, *out, view.DeletionPlanKind, []view.DeletionPlan{})
			}
			if structured(*out) {
				return printList(a.s.Out, *out, view.DeletionReportKind, []*view.DeletionReport{})
			}
			return nil
		}
		if abandon && (len(names) > 1 || len(args) != 1) {
			return usageError{errors.New("--abandon takes one backup at a time, by NAME")}
		}
		del, err := a.deleter(ctx)
		if err != nil {
			return err
		}
		if len(names) > 1 || len(args) != 1 {
			return a.deleteMany(ctx, del, names, opts, dryRun, yes, *out)
		}
		name := names[0]
		if !dryRun && !opts.Async {
			// Refuse before any question: nothing changes, exit 5.
			if err := del.Check(ctx, name, opts); err != nil {
				return deleteError(err)
			}
		}
		var total int64
		switch {
		case abandon && !dryRun:
			if !yes {
				stuck, n, err := del.Stuck(ctx, name)
				if err != nil {
					return err
				}
				q := fmt.Sprintf("--abandon purges backup %s even if items are still failed or blocked after this run", termtext.Quote(name))
				if stuck {
					q = fmt.Sprintf("Backup %s is stuck with %d failed or blocked items. --abandon retries them once, then purges it anyway", termtext.Quote(name), n)
				}
				if len(skipPlugins) > 0 {
					q += ", and abandons every item of " + strings.Join(quoteAll(skipPlugins), ", ")
				}
				q += ": whatever those items created outside may be left behind."
				ok, err := a.confirmName(q, name)
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintln(a.s.Err, "Nothing deleted.")
					return nil
				}
			}
		case dryRun || !yes:
			if a.s.InteractiveErr {
				fmt.Fprintf(a.s.Err, "Reading backup %s to plan its deletion...\n", termtext.Quote(name))
			}
			plan, err := del.Plan(ctx, name, opts)
			if err != nil {
				return deleteError(err)
			}
			if dryRun {
				cascadePlan, err := a.backupCascadePlan(ctx, name, prop)
				if err != nil {
					return err
				}
				if structured(*out) {
					return printObject(a.s.Out, *out, view.DeletionPlanKind, view.DeletionPlan{Kind: view.DeletionPlanKind, Plan: plan, Cascade: cascadePlan})
				}
				a.printPlan(plan)
				if cascadePlan != nil {
					fmt.Fprintln(a.s.Out)
					return a.printGCPlan(cascadePlan, "table")
				}
				return nil
			}
			if plan.Rejected != "" {
				return errors.New(termtext.Quote(plan.Rejected))
			}
			a.printWarnings(plan.Warnings)
			q := fmt.Sprintf("Delete backup %s (%s, %s)?", termtext.Quote(name), counted(plan.TotalItems, "item", "items"), pluginSummary(plan))
			if plan.DueAt != nil {
				q = fmt.Sprintf("Schedule the deletion of backup %s for %s?", termtext.Quote(name), plan.DueAt.Local().Format(time.RFC3339))
			}
			ok, err := a.confirm(q)
			if err != nil {
				return err
			}
			if !ok {
				fmt.Fprintln(a.s.Err, "Nothing deleted.")
				return nil
			}
			total = plan.TotalItems
		}
		if total == 0 {
			if r, err := a.store.Get(ctx, backup.Key(name)); err == nil {
				if b, err := backup.FromResource(r); err == nil {
					total = b.Spec.Items
				}
			}
		}
		bar := a.newProgress(total)
		opts.Progress = bar.update
		rep, err := del.Delete(ctx, name, opts)
		bar.finish()
		if err != nil {
			return deleteError(err)
		}
		if structured(*out) {
			if err := printObject(a.s.Out, *out, view.DeletionReportKind, view.NewDeletionReport(rep)); err != nil {
				return err
			}
		} else {
			a.printReport(rep)
			a.printWarnings(rep.Warnings)
		}
		if abandon && rep.Result == deletion.ResultScheduled {
			fmt.Fprintln(a.s.Err, "Note: --abandon applies to a deletion that runs now; this one waits in its grace window (add --force to run it now).")
		}
		if rep.Result == deletion.ResultIncomplete {
			return errIncomplete
		}
		if rep.Result == deletion.ResultWaiting && !opts.Async {
			return a.driveBackup(ctx, name, *out)
		}
		return nil
	}
	return c
}

// backupCascadePlan is the garbage collector's plan for the backup's
// dependents and referrers, or nil when it has none.
func (a *app) backupCascadePlan(ctx context.Context, name string, prop gc.Propagation) (*gc.Plan, error) {
	col, err := a.collector(ctx)
	if err != nil {
		return nil, err
	}
	p, err := col.Plan(ctx, backup.Key(name), prop)
	if err != nil || len(p.Entries) <= 1 {
		return nil, err
	}
	return p, nil
}

// driveBackup runs the collector here on a backup whose items are settled
// and whose cascade holds it, until it is purged (by its pipeline, once
// nothing holds it) or stuck.
func (a *app) driveBackup(ctx context.Context, name, out string) error {
	col, err := a.collector(ctx)
	if err != nil {
		return err
	}
	k := backup.Key(name)
	uid := ""
	if r, err := a.store.Get(ctx, k); err == nil {
		uid = r.UID
	}
	return a.driveGC(ctx, col, k, uid, out)
}

// deleteError maps the deletion's refusals: a bad --skip-plugin is a usage
// error; a missing plugin keeps its type for exit code 4.
func deleteError(err error) error {
	var se *deletion.SkipPluginError
	var be *deletion.BlockedError
	var ue *deletion.UnfinishedError
	var ro *deletion.ReadOnlyError
	switch {
	case errors.As(err, &se):
		return usageError{err}
	case errors.As(err, &be), errors.As(err, &ue), errors.As(err, &ro):
		return exitCodeError{exitRefused, err}
	}
	return err
}

// pluginRefusal reports whether err refuses work because plugins are
// missing or cannot load (exit code 4).
func pluginRefusal(err error) bool {
	var me *deletion.MissingPluginsError
	var pe *registry.PluginProblemsError
	return errors.As(err, &me) || errors.As(err, &pe) || errors.Is(err, deletion.ErrNoPlugins)
}

// confirmName asks, on a terminal, for the backup's name to be typed:
// the confirmation of an irreversible, lossy step.
func (a *app) confirmName(question, name string) (bool, error) {
	if !a.s.InteractiveIn {
		return false, usageError{errors.New("refusing to abandon without confirmation: stdin is not a terminal; pass --yes")}
	}
	fmt.Fprintf(a.s.Err, "%s\nType the backup's name (%s) to confirm: ", question, termtext.Quote(name))
	line, err := bufio.NewReader(a.s.In).ReadString('\n')
	if err != nil && line == "" {
		return false, nil
	}
	return strings.TrimSpace(line) == name, nil
}

func pluginSummary(p *deletion.Plan) string {
	var parts []string
	for _, pp := range p.Plugins {
		if pp.Items > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", termtext.Quote(pp.Plugin), pp.Items))
		}
	}
	if len(parts) == 0 {
		return "no plugin wants any item"
	}
	return "plugins " + strings.Join(parts, ", ")
}

// printWarnings writes a deletion's warnings on stderr, one line each.
func (a *app) printWarnings(warnings []string) {
	for _, w := range warnings {
		fmt.Fprintf(a.s.Err, "Warning: %s\n", termtext.Quote(w))
	}
}

func (a *app) printPlan(p *deletion.Plan) {
	w := a.s.Out
	fmt.Fprintf(w, "Plan for deleting backup %s (dry run: nothing changes)\n", termtext.Quote(p.Backup))
	fmt.Fprintf(w, "Phase:     %s\n", termtext.Quote(string(p.Phase)))
	for _, warn := range p.Warnings {
		fmt.Fprintf(w, "WARNING:   %s\n", termtext.Quote(warn))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Skipped)) {
		sk := p.Skipped[name]
		fmt.Fprintf(w, "SKIPPED:   plugin %s (--skip-plugin): items it would receive, abandoned: %d, e.g. %s\n",
			termtext.Quote(name), sk.Items, strings.Join(quoteAll(sk.Samples), ", "))
	}
	if p.Rejected != "" {
		fmt.Fprintf(w, "REJECTED:  %s\n", termtext.Quote(p.Rejected))
		fmt.Fprintln(w, "The deletion would stop before any plugin runs; nothing would change.")
		return
	}
	if p.DueAt != nil {
		fmt.Fprintf(w, "Schedule:  the deletion waits in a grace window until %s (use --force to skip it)\n", p.DueAt.Local().Format(time.RFC3339))
	}
	if ab := p.Abandon; ab != nil && ab.Tarball != "" {
		// The abandon path past a missing or replaced tarball: one
		// story, no plugin runs and the backup is purged.
		fmt.Fprintf(w, "Tarball:   %s: %s\n", strings.ToUpper(ab.Tarball), termtext.Quote(ab.TarballError))
		if ab.VolumeSnapshotsSent > 0 {
			fmt.Fprintf(w, "Snapshots: %s would still be sent to their plugins (their list is a file of its own):\n", counted(ab.VolumeSnapshotsSent, "native volume snapshot", "native volume snapshots"))
			for _, pp := range p.Plugins {
				if pp.Items > 0 {
					samples := make([]string, len(pp.Samples))
					for i, smp := range pp.Samples {
						samples[i] = termtext.Quote(smp)
					}
					fmt.Fprintf(w, "  %-36s %8d %-5s   e.g. %s\n", termtext.Quote(pp.Plugin), pp.Items, noun(pp.Items, "item", "items"), strings.Join(samples, ", "))
				}
			}
			fmt.Fprintf(w, "ABANDON:   no plugin would get the tarball's items; the backup would be purged with %d of its %s not settled "+
				"(%d failed or blocked, %d never sent to a plugin), and any snapshot its plugin fails or blocks, recorded in the audit log\n",
				ab.Items, counted(p.TotalItems, "item", "items"), ab.FailedOrBlocked, ab.NotSent)
			fmt.Fprintln(w, "Purged after the snapshots are sent:")
		} else {
			fmt.Fprintf(w, "ABANDON:   no plugin would run; the backup would be purged with %d of its %s not settled "+
				"(%d failed or blocked, %d never sent to a plugin), recorded in the audit log\n",
				ab.Items, counted(p.TotalItems, "item", "items"), ab.FailedOrBlocked, ab.NotSent)
			fmt.Fprintln(w, "Purged without running any plugin:")
		}
		for _, s := range p.Purge {
			fmt.Fprintf(w, "  %s\n", termtext.Quote(s))
		}
		return
	}
	if p.VolumeSnapshots > 0 {
		fmt.Fprintf(w, "Items:     %d (%d in the tarball, %s)", p.TotalItems, p.TotalItems-p.VolumeSnapshots, counted(p.VolumeSnapshots, "native volume snapshot", "native volume snapshots"))
	} else {
		fmt.Fprintf(w, "Items:     %d in the tarball", p.TotalItems)
	}
	if p.AlreadySettled > 0 {
		fmt.Fprintf(w, ", %d already settled by an earlier run", p.AlreadySettled)
	}
	fmt.Fprintf(w, ", %d wanted by no plugin\n", p.Unmatched)
	fmt.Fprintln(w, "Plugins, in the order they run:")
	if len(p.Plugins) == 0 {
		fmt.Fprintln(w, "  (none installed: items would be settled without any plugin)")
	}
	for _, pp := range p.Plugins {
		fmt.Fprintf(w, "  %-36s %8d %-5s   selector: %s\n", termtext.Quote(pp.Plugin), pp.Items, noun(pp.Items, "item", "items"), termtext.Quote(pp.Selector))
		for _, s := range pp.Samples {
			fmt.Fprintf(w, "      e.g. %s\n", termtext.Quote(s))
		}
	}
	if ab := p.Abandon; ab != nil && ab.Items == 0 {
		fmt.Fprintln(w, "ABANDON:   any item failed or blocked after this run would be abandoned, and the backup purged anyway, "+
			"recorded in the audit log")
		fmt.Fprintln(w, "Purged after this run, even with items not settled:")
	} else if ab != nil {
		are := counted(ab.Items, "item is", "items are")
		fmt.Fprintf(w, "ABANDON:   %s failed or blocked; they would be retried once, and any item still failed "+
			"or blocked after this run abandoned, recorded in the audit log\n", are)
		fmt.Fprintln(w, "Purged after this run, even with items not settled:")
	} else {
		fmt.Fprintln(w, "Purged once every item is done or skipped:")
	}
	for _, s := range p.Purge {
		fmt.Fprintf(w, "  %s\n", termtext.Quote(s))
	}
}

func (a *app) printReport(r *deletion.Report) {
	w := a.s.Out
	b := termtext.Quote(r.Backup)
	purged := strings.Join(quoteAll(r.Purged), " and ")
	switch r.Result {
	case deletion.ResultScheduled:
		fmt.Fprintf(w, "backup %s: deletion scheduled for %s (in %s); undo with: lethe backup undelete %s\n",
			b, r.DueAt.Local().Format(time.RFC3339), human(time.Until(r.DueAt)), b)
		return
	case deletion.ResultQueued:
		fmt.Fprintf(w, "backup %s: deletion requested; 'lethe server' will run it (follow with: lethe backup get %s)\n", b, b)
		return
	case deletion.ResultWaiting:
		fmt.Fprintf(w, "backup %s: %s settled; its purge waits for %s (lethe explain backup %s)\n",
			b, counted(r.TotalItems, "item", "items"), strings.Join(quoteAll(r.WaitingFor), "; "), b)
		return
	}
	if len(r.Counts) > 0 {
		t := newTable(w, "PLUGIN", "DONE", "SKIPPED", "FAILED", "BLOCKED")
		for _, name := range slices.Sorted(maps.Keys(r.Counts)) {
			c := r.Counts[name]
			t.row(termtext.Quote(name), fmt.Sprint(c.Done), fmt.Sprint(c.Skipped), fmt.Sprint(c.Failed), fmt.Sprint(c.Blocked))
		}
		_ = t.flush()
	}
	switch r.Result {
	case deletion.ResultPurged:
		if r.Forced && r.TarballProblem != "" {
			without := "without its plugins"
			if r.SnapshotsSent > 0 {
				without = fmt.Sprintf("its %s sent to their plugins, its tarball's items to none", counted(r.SnapshotsSent, "native volume snapshot", "native volume snapshots"))
			}
			fmt.Fprintf(w, "backup %s deleted, ABANDONING, %s (its tarball was %s): %d of %s not settled %s abandoned "+
				"(%d failed or blocked, %d never sent to a plugin; lethe audit --name %s); purged %s\n",
				b, without, termtext.Quote(r.TarballProblem), r.UnsettledCount, counted(r.TotalItems, "item", "items"), isAre(r.UnsettledCount), int64(r.UnsettledCount)-r.NotSent, r.NotSent,
				b, purged)
			for _, o := range r.Unsettled {
				fmt.Fprintf(w, "  abandoned %s\n", outcomeText(o))
			}
			return
		}
		if r.Forced {
			what := counted(r.UnsettledCount, "item was", "items were") + " still failed or blocked and " + isAre(r.UnsettledCount) + " abandoned"
			if r.UnsettledCount == 0 && len(r.Skipped) > 0 {
				what = "the items of the skipped plugins are abandoned"
			}
			fmt.Fprintf(w, "backup %s deleted, ABANDONING: %s (lethe audit --name %s); purged %s\n",
				b, what, b, purged)
			for _, name := range slices.Sorted(maps.Keys(r.Skipped)) {
				fmt.Fprintf(w, "  abandoned %s at skipped plugin %s, e.g. %s\n", counted(r.Skipped[name].Items, "item", "items"), termtext.Quote(name), strings.Join(quoteAll(r.Skipped[name].Samples), ", "))
			}
			for _, o := range r.Unsettled {
				fmt.Fprintf(w, "  abandoned %s\n", outcomeText(o))
			}
			return
		}
		fmt.Fprintf(w, "backup %s deleted: %s; purged %s\n", b, counted(r.TotalItems, "item", "items"), purged)
	case deletion.ResultIncomplete:
		fmt.Fprintf(w, "backup %s NOT deleted: %d of %s %s failed or blocked; the backup and its tarball stay.\n",
			b, r.UnsettledCount, counted(r.TotalItems, "item", "items"), isAre(r.UnsettledCount))
		for _, o := range r.Unsettled {
			fmt.Fprintf(w, "  %s\n", outcomeText(o))
		}
		if r.UnsettledCount > len(r.Unsettled) {
			fmt.Fprintf(w, "  ... and %d more (lethe backup get %s -o json)\n", r.UnsettledCount-len(r.Unsettled), b)
		}
		fmt.Fprintf(w, "Fix the cause, then run 'lethe backup delete %s' again: only these items are retried.\n", b)
		fmt.Fprintf(w, "Meanwhile they wait in the retry queue, which 'lethe server' runs on a backoff: lethe retry list\n")
	}
}

// outcomeText shows an unsettled item: outcome, item key, plugin and
// message, as read back from the catalog.
func outcomeText(o catalog.ItemOutcome) string {
	return fmt.Sprintf("%-7s %s  %s: %s", termtext.Quote(o.Outcome), termtext.Quote(o.ItemKey), termtext.Quote(o.Plugin), termtext.Quote(o.Message))
}

// progress shows a bar on a terminal and plain lines elsewhere.
type progress struct {
	mu       sync.Mutex
	bar      *progressbar.ProgressBar
	a        *app
	total    int64
	last     time.Time
	lastDone int64
}

func (a *app) newProgress(total int64) *progress {
	p := &progress{a: a, total: total, last: time.Now()}
	if a.s.InteractiveErr && total > 0 {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(a.s.Err),
			progressbar.OptionSetDescription("deleting"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("items"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

func (p *progress) update(pr deletion.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Set64(pr.Processed)
		return
	}
	if now := time.Now(); now.Sub(p.last) >= 2*time.Second {
		rate := float64(pr.Processed-p.lastDone) / now.Sub(p.last).Seconds()
		fmt.Fprintf(p.a.s.Err, "progress: %d/%s (%.0f items/s)\n", pr.Processed, counted(pr.Total, "item", "items"), rate)
		p.last, p.lastDone = now, pr.Processed
	}
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
