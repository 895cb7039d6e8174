package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

// exitCodeError carries the exit code of a refusal or a missing resource
// out of a command (see Run).
type exitCodeError struct {
	code int
	err  error
}

func (e exitCodeError) Error() string { return e.err.Error() }
func (e exitCodeError) Unwrap() error { return e.err }

// exitRefused: the request was refused (a plugin is missing, a block
// reference holds the target); nothing changed.
const exitRefused = 5

// gcError maps the collector's errors to exit codes.
func gcError(err error) error {
	var refused *gc.RefusedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refused):
		return exitCodeError{exitRefused, err}
	case errors.Is(err, catalog.ErrNotFound):
		return exitCodeError{exitNotFound, err}
	case errors.Is(err, catalog.ErrInvalid):
		return usageError{err}
	}
	return err
}

// missing says a missing or purged resource as get says it (Account "a"
// not found; ... was purged at ...): the collector's own "not found" of
// the key becomes a *backup.NotFoundError, exit 4. Other errors pass.
func (a *app) missing(ctx context.Context, k catalog.Key, err error) error {
	var nf *backup.NotFoundError
	if !errors.Is(err, catalog.ErrNotFound) || errors.As(err, &nf) {
		return err
	}
	st, serr := a.catalog(ctx)
	if serr != nil {
		return err
	}
	if _, gerr := getResource(ctx, st, k); errors.As(gerr, &nf) {
		return nf
	}
	return err
}

// collector wires a garbage collector on the catalog and the plugins. A
// Backup it finds free of its cascade is purged by a deletion pipeline
// made on first use.
func (a *app) collector(ctx context.Context) (*gc.Collector, error) {
	return a.collectorWith(ctx, nil, deletion.Options{})
}

// collectorWith is collector, purging backups with del (nil: one made on
// first use) and opts.
func (a *app) collectorWith(ctx context.Context, del *deletion.Deleter, opts deletion.Options) (*gc.Collector, error) {
	st, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	h, err := a.plugins(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.g.retry.checkPluginNames(h.Plugins()); err != nil {
		return nil, err
	}
	q, err := a.retryQueue(ctx)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	purge := func(ctx context.Context, r *catalog.Resource) error {
		mu.Lock()
		if del == nil {
			d, err := a.deleter(ctx)
			if err != nil {
				mu.Unlock()
				return err
			}
			del = d
		}
		mu.Unlock()
		_, err := del.Resume(ctx, r.UID, opts)
		return err
	}
	return gc.New(gc.Config{Store: st, Plugins: gc.HostPlugins(h), Logger: a.log, Retry: q,
		Holder: deletion.DefaultHolder(), DeadHolder: deletion.DeadLocalHolder, PurgeBackup: purge})
}

// resourceKey reads KIND NAME [-n NS].
func resourceKey(kind, name, ns string) (catalog.Key, error) {
	if kind == "" || name == "" {
		return catalog.Key{}, usageError{errors.New("KIND and NAME must not be empty")}
	}
	k := catalog.Key{Kind: kindName(kind), Namespace: ns, Name: name}
	return k, validateKey(k)
}

func newDeleteCmd(a *app) *cobra.Command {
	var ns, cascade, selector string
	var files []string
	var dryRun, yes, wait, async, force, noPlugins, ignoreNotFound bool
	c := &cobra.Command{
		Use:   "delete KIND NAME... | KIND -l SELECTOR | -f FILE|DIR|-",
		Short: "Delete a resource of any kind, with its dependents (cascade)",
		Long: `Delete moves a resource to Deleting and lets the garbage collector carry the
deletion along its owner and reference edges, as Kubernetes does:

  --cascade=foreground  (default) dependents are deleted first; the resource is
                        purged once no dependent with blockOwnerDeletion is left
  --cascade=background  the resource is purged as soon as its own finalizers
                        allow; its dependents are deleted after
  --cascade=orphan      dependents lose the owner edge and stay

A dependent with another owner that remains only loses the edge. Referrers
follow their reference's onTargetDelete: block (the target waits for them,
and a direct delete of the target is refused, naming them), unset (the
reference is removed), cascade (the referrer is deleted too), allowDangling
(nothing happens). Every resource that enters Deleting is one item for the
plugins that select it, and is purged only when they are done with it.

With --wait (the default on a terminal) the collector runs here, with
progress, until the cascade is done or stuck; Ctrl-C stops it at any moment
and 'lethe server' (or another --wait) carries on. --async only requests
the deletion. 'lethe explain KIND NAME' says what a deletion waits for.

A resource annotated lethe.io/deletion-delay is only scheduled (grace
window); --force skips the wait.

--wait always ends: purged, stuck (exit 3), or re-created: when the
resource is purged and a new one of the same name (another UID) is created
meanwhile, its deletion is reported done and the new one is left alone.
A request for a resource already Deleting joins that deletion, so two
identical deletes run at once both succeed. --ignore-not-found makes a
resource that does not exist, or was purged, not an error. 'lethe delete backup NAME' is
'lethe backup delete NAME' with the same --cascade: the backup's items go
through its plugins, and its purge waits for its cascade the same way;
a backup's items run in one process at a time, so a second delete of a
backup being deleted exits 1 naming the process that holds it.

Exit codes: 0 purged (or scheduled, or requested with --async), 1 error,
2 bad usage, 3 stuck (see lethe explain), 4 no such resource, 5 refused
(block references hold it; nothing changed), 130 interrupted.

-f deletes every resource a manifest names (the files 'lethe apply' reads:
a file, a folder, or - for stdin; only each document's kind, namespace and
name are used), last document first, each with the same flags. Every one
is checked before anything changes: a bad file, a missing resource or a
block reference from outside the set changes nothing. Several names after
KIND, or -l SELECTOR (the resources of KIND in -n's namespace that it
selects), are deleted the same way, in the order given.`,
		Example: `  # What would go, then do it
  lethe delete Schedule nightly -n prod --dry-run
  lethe delete Schedule nightly -n prod --yes

  # Keep the dependents
  lethe delete Schedule nightly -n prod --cascade=orphan --yes

  # Leave the work to 'lethe server'
  lethe delete VolumeSnapshot snap-a -n prod --yes --async

  # Several at once, by name or by label
  lethe delete Database orders users -n shop --yes
  lethe delete Database -l team=db -n shop --dry-run

  # Everything a manifest declares, previewed first
  lethe delete -f shop.yaml --dry-run
  lethe delete -f shop.yaml --yes --wait`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(files) > 0 {
				if len(args) > 0 {
					return usageError{errors.New("give either KIND NAME or -f FILE, not both")}
				}
				return nil
			}
			if selector != "" {
				if len(args) != 1 {
					return usageError{fmt.Errorf("with -l, give only KIND (got %d arguments): -l selects the names", len(args))}
				}
				return nil
			}
			if len(args) < 2 {
				return exactArgs(2, "KIND and NAME")(cmd, args)
			}
			return nil
		},
	}
	out := outputFlag(c, "table")
	fl := c.Flags()
	fl.StringVarP(&ns, "namespace", "n", "", "namespace (empty: cluster-scoped)")
	fl.StringVar(&cascade, "cascade", "foreground", "what happens to dependents: foreground, background or orphan")
	fl.BoolVar(&dryRun, "dry-run", false, "print the whole plan (every resource deleted, orphaned, unlinked, unset or blocked, and the plugins for each) and change nothing")
	fl.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	fl.BoolVar(&wait, "wait", false, "run the collector here until the cascade is done or stuck (default on a terminal)")
	fl.BoolVar(&async, "async", false, "only request the deletion; 'lethe server' carries it out")
	fl.BoolVar(&force, "force", false, "skip the grace window (lethe.io/deletion-delay) and delete now")
	fl.BoolVar(&noPlugins, "no-plugins", false, "backups only: allow the deletion with no plugin installed (as lethe backup delete --no-plugins)")
	fl.BoolVar(&ignoreNotFound, "ignore-not-found", false, "a resource that does not exist, or was purged, is not an error (exit 0)")
	fl.StringArrayVarP(&files, "filename", "f", nil, "delete the resources a manifest names: file, folder, or - for stdin (repeatable)")
	fl.StringVarP(&selector, "selector", "l", "", "delete the resources of KIND (in -n's namespace) that this label selector selects, e.g. team=db")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		if wait && async {
			return usageError{errors.New("--wait and --async exclude each other")}
		}
		prop, err := gc.ParsePropagation(cascade)
		if err != nil {
			return usageError{fmt.Errorf("--cascade: %w", err)}
		}
		if !wait && !async {
			wait = a.s.InteractiveErr
		}
		if len(files) > 0 {
			if ns != "" {
				return usageError{errors.New("-n does not go with -f: the manifests name their namespaces")}
			}
			return a.deleteFiles(cmd.Context(), files, gc.DeleteOptions{Propagation: prop, Force: force}, fileDeleteFlags{dryRun: dryRun, yes: yes, wait: wait, ignoreNotFound: ignoreNotFound}, *out)
		}
		if selector != "" || len(args) > 2 {
			return a.deleteSeveral(cmd, args[0], args[1:], selector, ns, prop,
				fileDeleteFlags{dryRun: dryRun, yes: yes, wait: wait, ignoreNotFound: ignoreNotFound},
				backupFlags{dryRun: dryRun, yes: yes, wait: wait, force: force, noPlugins: noPlugins}, force, *out)
		}
		k, err := resourceKey(args[0], args[1], ns)
		if err != nil {
			return err
		}
		if k.Kind, err = a.kindOf(cmd.Context(), k.Kind); err != nil {
			return err
		}
		ctx := cmd.Context()
		notFound := func(err error) error {
			err = a.missing(ctx, k, err)
			var nf *backup.NotFoundError
			if ignoreNotFound && (errors.Is(err, catalog.ErrNotFound) || errors.As(err, &nf)) {
				return a.gcResult(k, "not found", "ignored (--ignore-not-found)", *out)
			}
			return err
		}
		if k.Kind == backup.Kind {
			if ignoreNotFound {
				st, err := a.catalog(ctx)
				if err != nil {
					return err
				}
				if _, err := getResource(ctx, st, k); err != nil {
					return notFound(err)
				}
			}
			return a.deleteBackup(cmd, k, prop, backupFlags{dryRun: dryRun, yes: yes, wait: wait, force: force, noPlugins: noPlugins}, *out)
		}
		col, err := a.collector(ctx)
		if err != nil {
			return err
		}
		opts := gc.DeleteOptions{Propagation: prop, DryRun: true, Force: force}
		plan, err := col.Delete(ctx, k, opts)
		if err != nil {
			return notFound(gcError(err))
		}
		// The resource planned and confirmed: a new one of the same name
		// is not deleted in its place, nor waited for.
		if st, err := a.catalog(ctx); err != nil {
			return err
		} else if r, err := st.Get(ctx, k); err != nil {
			return notFound(gcError(err))
		} else {
			opts.UID = r.UID
		}
		if dryRun {
			return a.printGCPlan(plan, *out)
		}
		if !yes {
			ok, err := a.confirm(fmt.Sprintf("Delete %s (%s)?", keyText(k), planSummary(plan)))
			if err != nil {
				return err
			}
			if !ok {
				fmt.Fprintln(a.s.Err, "Nothing deleted.")
				return nil
			}
		}
		opts.DryRun = false
		plan, err = col.Delete(ctx, k, opts)
		var re *gc.RecreatedError
		if errors.As(err, &re) {
			return a.gcResult(k, "purged", recreatedNote(re.NewUID), *out)
		}
		if err != nil {
			return notFound(gcError(err))
		}
		if plan.ScheduledUntil != nil {
			return a.gcResult(k, "scheduled", "in its grace window until "+plan.ScheduledUntil.UTC().Format("2006-01-02T15:04:05Z")+"; delete again with --force to skip it", *out)
		}
		if !wait {
			return a.gcResult(k, "requested", "lethe server carries it out; "+retry.ExplainCommand(k)+" shows progress", *out)
		}
		return a.driveGC(ctx, col, k, opts.UID, *out)
	}
	return c
}

// deleteSeveral is 'lethe delete KIND NAME NAME...' and 'lethe delete KIND -l
// SELECTOR': the resources named or selected, checked together before
// anything changes (as delete -f). Backups go through 'lethe backup
// delete', which takes several names and -l itself.
func (a *app) deleteSeveral(cmd *cobra.Command, kindArg string, names []string, selector, ns string, prop gc.Propagation,
	fl fileDeleteFlags, bfl backupFlags, force bool, out string) error {
	ctx := cmd.Context()
	if selector != "" {
		if err := checkSelector(selector); err != nil {
			return err
		}
	}
	kind, err := a.kindOf(ctx, kindArg)
	if err != nil {
		return err
	}
	if kind == backup.Kind {
		return a.deleteBackups(cmd, names, selector, ns, prop, bfl, out)
	}
	var keys []catalog.Key
	for _, n := range names {
		k, err := resourceKey(kindArg, n, ns)
		if err != nil {
			return err
		}
		k.Kind = kind
		keys = append(keys, k)
	}
	if selector != "" {
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		rs, err := listAll(ctx, st, catalog.ListOptions{Kind: kind, Namespace: ns, LabelSelector: selector})
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Namespace == ns {
				keys = append(keys, r.Key())
			}
		}
		if len(keys) == 0 {
			fmt.Fprintf(a.s.Err, "No %s resources selected by %s.\n", termtext.Quote(kind), termtext.Quote(selector))
			return nil
		}
	}
	return a.deleteKeys(ctx, keys, gc.DeleteOptions{Propagation: prop, Force: force}, fl, out)
}

// recreatedNote says that the key now holds a new resource, left alone.
func recreatedNote(newUID string) string {
	return "a new resource of the same name (UID " + newUID + ") was created meanwhile; it is left alone"
}

// deleteBackup is 'lethe backup delete' (the deletion pipeline), then the
// collector on the backup's dependents.
type backupFlags struct{ dryRun, yes, wait, force, noPlugins bool }

func (a *app) deleteBackup(cmd *cobra.Command, k catalog.Key, prop gc.Propagation, fl backupFlags, out string) error {
	return a.deleteBackups(cmd, []string{k.Name}, "", k.Namespace, prop, fl, out)
}

// deleteBackups is deleteBackup of several names, or of the backups a
// selector selects.
func (a *app) deleteBackups(cmd *cobra.Command, names []string, selector, ns string, prop gc.Propagation, fl backupFlags, out string) error {
	if ns != "" {
		return usageError{errors.New("backups are cluster-scoped: drop -n")}
	}
	ctx := cmd.Context()
	bc := newBackupDeleteCmd(a)
	bc.SetContext(ctx)
	set := func(name string, on bool) {
		if on {
			_ = bc.Flags().Set(name, "true")
		}
	}
	set("dry-run", fl.dryRun)
	set("yes", fl.yes)
	set("force", fl.force)
	set("no-plugins", fl.noPlugins)
	set("async", !fl.wait)
	_ = bc.Flags().Set("output", out)
	_ = bc.Flags().Set("cascade", string(prop))
	if selector != "" {
		_ = bc.Flags().Set("selector", selector)
	}
	// The backup's cascade runs in it: its purge waits for what holds it,
	// and with --wait the collector runs until it is done or stuck.
	return bc.RunE(bc, names)
}

// driveGC runs the collector here until the cascade of k is done or stuck.
func (a *app) driveGC(ctx context.Context, col *gc.Collector, k catalog.Key, uid, out string) error {
	progress := func(int) {}
	if a.s.InteractiveErr {
		progress = func(n int) { fmt.Fprintf(a.s.Err, "\rcollecting %s: %d purged", keyText(k), n) }
	}
	res, err := col.Drive(ctx, k, gc.DriveOptions{Progress: progress, UID: uid})
	if a.s.InteractiveErr {
		fmt.Fprintln(a.s.Err)
	}
	if err != nil {
		return err
	}
	if res == gc.OutcomeStuck {
		e, err := col.Explain(ctx, k)
		if err != nil {
			return err
		}
		if structured(out) {
			if err := printObject(a.s.Out, out, kindDeletionResult, deletionResultView{Resource: k, Result: "stuck", Explanation: e}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(a.s.Out, "%s is stuck:\n", keyText(k))
			if err := gc.WriteTree(a.s.Out, e); err != nil {
				return err
			}
		}
		return errIncomplete
	}
	if res == gc.OutcomeRecreated {
		note := "a new resource of the same name was created meanwhile; it is left alone"
		if st, err := a.catalog(ctx); err == nil {
			if r, err := st.Get(ctx, k); err == nil {
				note = recreatedNote(r.UID)
			}
		}
		return a.gcResult(k, "purged", note, out)
	}
	return a.gcResult(k, "purged", "", out)
}

func (a *app) gcResult(k catalog.Key, result, note, out string) error {
	if structured(out) {
		return printObject(a.s.Out, out, kindDeletionResult, deletionResultView{Resource: k, Result: result, Note: note})
	}
	line := keyText(k) + ": " + result
	if note != "" {
		line += "; " + termtext.Quote(note)
	}
	fmt.Fprintln(a.s.Out, line)
	return nil
}

func planSummary(p *gc.Plan) string {
	parts := []string{counted(p.Count(gc.ActionDelete), "resource", "resources") + " deleted"}
	if n := p.Count(gc.ActionSchedule); n > 0 {
		parts = append(parts, fmt.Sprintf("%d scheduled first (their own grace windows)", n))
	}
	for _, x := range []string{gc.ActionOrphan, gc.ActionUnlink, gc.ActionUnset, gc.ActionBlocked} {
		if n := p.Count(x); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, x))
		}
	}
	return strings.Join(parts, ", ")
}

func (a *app) printGCPlan(p *gc.Plan, out string) error {
	if structured(out) {
		return printObject(a.s.Out, out, kindCascadePlan, p)
	}
	fmt.Fprintf(a.s.Out, "Deleting %s (%s) would: %s. Nothing was changed.\n\n", keyText(p.Root), p.Propagation, planSummary(p))
	t := newTable(a.s.Out, "ACTION", "RESOURCE", "PHASE", "PLUGINS", "WHY")
	for _, e := range p.Entries {
		plugins := strings.Join(quoteAll(e.Plugins), ",")
		if plugins == "" {
			plugins = "-"
		}
		t.row(e.Action, keyText(e.Resource), termtext.Quote(string(e.Phase)), plugins, termtext.Quote(e.Reason))
	}
	return t.flush()
}

func newExplainCmd(a *app) *cobra.Command {
	var ns string
	c := &cobra.Command{
		Use:   "explain KIND NAME",
		Short: "Say why a resource is not gone yet, as a tree of what it waits for",
		Long: `Explain prints a resource's phase, the finalizers it has left, and what its
deletion waits for, recursively: dependents with blockOwnerDeletion (under
Foreground), referrers that hold a block reference to it, plugins that have
not finished with it, user finalizers. A branch marked [stuck] waits on
something that is not itself being deleted (an Active referrer, a finalizer
nobody removes, a plugin that keeps blocking, a cycle).

-o json has a stable schema (docs/output.md): {"apiVersion": "lethe.io/v1",
"kind": "Explanation", "resource": {"kind","namespace","name"}, "phase",
"reason", "finalizers", "stuck", "retries", "waitingFor": [ ...the same
shape, without apiVersion and kind... ]}.`,
		Example: `  lethe explain Volume c -n prod
  lethe explain Schedule nightly -n prod -o json`,
		Args: exactArgs(2, "KIND and NAME"),
	}
	out := outputFlag(c, "table")
	c.Flags().StringVarP(&ns, "namespace", "n", "", "namespace (empty: cluster-scoped)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		k, err := resourceKey(args[0], args[1], ns)
		if err != nil {
			return err
		}
		if k.Kind, err = a.kindOf(cmd.Context(), k.Kind); err != nil {
			return err
		}
		st, err := a.catalog(cmd.Context())
		if err != nil {
			return err
		}
		q, err := a.retryQueue(cmd.Context())
		if err != nil {
			return err
		}
		// Explaining starts no plugin: it reads the catalog (and its
		// retry queue) only.
		col, err := gc.New(gc.Config{Store: st, NoPlugins: true, Logger: a.log, Retry: q})
		if err != nil {
			return err
		}
		e, err := col.Explain(cmd.Context(), k)
		if err != nil {
			return gcError(a.missing(cmd.Context(), k, err))
		}
		if structured(*out) {
			return printObject(a.s.Out, *out, view.ExplanationKind, e)
		}
		return gc.WriteTree(a.s.Out, e)
	}
	return c
}

func newFinalizeCmd(a *app) *cobra.Command {
	var ns string
	c := &cobra.Command{
		Use:   "finalize KIND NAME FINALIZER",
		Short: "Remove a user finalizer from a resource being deleted",
		Long: `Finalize removes one user finalizer from a Deleting resource: the call an
external controller makes when its own cleanup is done (Go API:
gc.Finalize). The collector then purges the resource once nothing else
holds it. Lethe's own finalizers (lethe.io/cascade, lethe.io/delete-actions)
are refused: Lethe removes them itself.

Exit codes: 0 removed, 1 error, 2 bad usage (not Deleting, no such
finalizer, a Lethe finalizer), 4 no such resource.`,
		Example: `  lethe finalize Bucket logs -n prod example.com/empty-first`,
		Args:    exactArgs(3, "KIND, NAME and FINALIZER"),
	}
	c.Flags().StringVarP(&ns, "namespace", "n", "", "namespace (empty: cluster-scoped)")
	ignoreNotFound := c.Flags().Bool("ignore-not-found", false, "a resource that does not exist, or was purged, is not an error")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		k, err := resourceKey(args[0], args[1], ns)
		if err != nil {
			return err
		}
		if k.Kind, err = a.kindOf(cmd.Context(), k.Kind); err != nil {
			return err
		}
		st, err := a.catalog(cmd.Context())
		if err != nil {
			return err
		}
		// Missing and purged are said as get says them.
		if _, err := getResource(cmd.Context(), st, k); err != nil {
			var nf *backup.NotFoundError
			if *ignoreNotFound && errors.As(err, &nf) {
				fmt.Fprintf(a.s.Out, "%s: not found (ignored)\n", keyText(k))
				return nil
			}
			return err
		}
		err = gc.Finalize(cmd.Context(), st, k, args[2])
		var fe *gc.FinalizeError
		if errors.As(err, &fe) {
			return usageError{err}
		}
		if *ignoreNotFound && errors.Is(err, catalog.ErrNotFound) {
			fmt.Fprintf(a.s.Out, "%s: not found (ignored)\n", keyText(k))
			return nil
		}
		if err != nil {
			return gcError(err)
		}
		fmt.Fprintf(a.s.Out, "%s: finalizer %s removed\n", keyText(k), termtext.Quote(args[2]))
		return nil
	}
	return c
}
