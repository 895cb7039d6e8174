package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/termtext"
)

// kindUndeleteResult is the kind of what undelete did to one resource.
const kindUndeleteResult = "UndeleteResult"

// undeleteResultView is one resource's undelete: undeleted, or not found
// (only with --ignore-not-found).
type undeleteResultView struct {
	Resource catalog.Key `json:"resource"`
	Result   string      `json:"result"` // "undeleted" or "not found"
	Note     string      `json:"note,omitempty"`
}

func newUndeleteCmd(a *app) *cobra.Command {
	var ns string
	var files []string
	var ignoreNotFound bool
	c := &cobra.Command{
		Use:   "undelete KIND NAME | -f FILE",
		Short: "Cancel a scheduled deletion (any kind, bundles included) while its grace window is open; audited",
		Long: `Undelete returns a resource whose deletion is Scheduled (in its grace
window, lethe.io/deletion-delay) to Active: a backup, a bundle, a bundle's
member pruned with a delay, or a resource of any kind. It works until the
resource enters Deleting, across restarts (the schedule is in the catalog),
and is written to the audit log in the name of whoever ran it. Once a
deletion is running (Deleting), plugins have acted and it cannot be undone.

With -f, every resource the manifests name is undeleted, all checked
first: one that is not Scheduled stops the command before anything changes.

A member of a bundle that was pruned and then undeleted stays out of the
bundle's spec: the next apply of the bundle prunes it again, unless the
member is back in the spec.`,
		Example: `  lethe undelete backup nightly-0412
  lethe undelete Database orders -n shop
  lethe undelete bundle shop
  lethe undelete -f shop.yaml
  lethe undelete Service web -n shop --ignore-not-found`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(files) > 0 {
				if len(args) > 0 {
					return usageError{errors.New("give either KIND NAME or -f FILE, not both")}
				}
				return nil
			}
			return exactArgs(2, "KIND and NAME (or -f FILE)")(cmd, args)
		},
	}
	c.Flags().StringVarP(&ns, "namespace", "n", "", "namespace (empty: cluster-scoped)")
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "undelete the resources a manifest names: file, folder, or - for stdin (repeatable)")
	c.Flags().BoolVar(&ignoreNotFound, "ignore-not-found", false, "a resource that does not exist, or was purged, is not an error")
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		ctx := cmd.Context()
		var keys []catalog.Key
		if len(files) > 0 {
			if ns != "" {
				return usageError{errors.New("-n does not go with -f: the manifests name their namespaces")}
			}
			docs, err := a.loadManifests(files)
			if err != nil {
				return err
			}
			for _, d := range docs {
				keys = append(keys, d.Key())
			}
		} else {
			k, err := resourceKey(args[0], args[1], ns)
			if err != nil {
				return err
			}
			if k.Kind, err = a.kindOf(ctx, k.Kind); err != nil {
				return err
			}
			keys = []catalog.Key{k}
		}
		return a.undelete(ctx, keys, ignoreNotFound, *out, len(files) > 0)
	}
	return c
}

// newBackupUndeleteCmd is 'lethe undelete backup NAME', under backup.
func newBackupUndeleteCmd(a *app) *cobra.Command {
	var ignoreNotFound bool
	c := &cobra.Command{
		Use:   "undelete NAME",
		Short: "Cancel a scheduled deletion while its grace window is open (as lethe undelete backup NAME)",
		Long: `Undelete returns a backup whose deletion is Scheduled to Active. It works
until the grace window ends, across restarts. Once a deletion is running
(Deleting), plugins have acted and it can no longer be undone. It is
'lethe undelete backup NAME'.`,
		Example: `  lethe backup undelete nightly-0412`,
		Args:    exactArgs(1, "NAME"),
	}
	c.Flags().BoolVar(&ignoreNotFound, "ignore-not-found", false, "a backup that does not exist, or was purged, is not an error")
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		return a.undelete(cmd.Context(), []catalog.Key{backup.Key(args[0])}, ignoreNotFound, *out, false)
	}
	return c
}

// undelete undeletes keys: every one is checked (it exists, unless
// ignoreNotFound, and is Scheduled) before any is undeleted.
func (a *app) undelete(ctx context.Context, keys []catalog.Key, ignoreNotFound bool, out string, list bool) error {
	for _, k := range keys {
		if k.Kind == backup.Kind {
			if err := backup.ValidateName(k.Name); err != nil {
				return usageError{err}
			}
		}
	}
	st, err := a.catalog(ctx)
	if err != nil {
		return err
	}
	var nf *backup.NotFoundError
	results := make([]*undeleteResultView, 0, len(keys))
	var todo []catalog.Key
	before := map[catalog.Key]*catalog.Resource{}
	for _, k := range keys {
		r, err := backup.Get(ctx, st, k)
		switch {
		case errors.As(err, &nf) && ignoreNotFound:
			results = append(results, &undeleteResultView{Resource: k, Result: "not found", Note: err.Error()})
			continue
		case err != nil:
			return err
		}
		if err := undeletable(r); err != nil {
			return err
		}
		todo = append(todo, k)
		before[k] = r
		results = append(results, &undeleteResultView{Resource: k, Result: "undeleted"})
	}
	now := time.Now()
	undeleted := map[catalog.Key]*catalog.Resource{}
	for i, k := range todo {
		var notes []string
		var after *catalog.Resource
		if k.Kind == backup.Kind {
			r, ttlCleared, err := deletion.Undelete(ctx, st, k.Name, now)
			if err != nil {
				return err
			}
			undeleted[k], after = r, r
			if ttlCleared {
				notes = append(notes, "its TTL had expired, so it was removed: the backup no longer expires")
			}
		} else if r, err := st.Undelete(catalog.WithDefaultActor(ctx, "cli"), k, "undelete requested"); err != nil {
			var te *catalog.TransitionError
			if errors.As(err, &te) {
				return usageError{fmt.Errorf("%s: %w", keyText(k), err)}
			}
			return err
		} else {
			after = r
		}
		if left := leftCascades(before[k], after); left != "" {
			notes = append(notes, left)
		}
		note := strings.Join(notes, "; ")
		for _, r := range results {
			if r.Resource == todo[i] {
				r.Note = note
			}
		}
	}
	if structured(out) {
		if list {
			return printList(a.s.Out, out, kindUndeleteResult, results)
		}
		return printObject(a.s.Out, out, kindUndeleteResult, results[0])
	}
	for _, r := range results {
		if r.Result == "undeleted" {
			fmt.Fprintf(a.s.Out, "%s: scheduled deletion cancelled; it is Active again\n", keyText(r.Resource))
			if r.Note != "" {
				fmt.Fprintf(a.s.Out, "%s: %s\n", keyText(r.Resource), termtext.Quote(r.Note))
			}
			printRetentionHold(a, undeleted[r.Resource])
		} else {
			fmt.Fprintf(a.s.Out, "%s: not found (ignored)\n", keyText(r.Resource))
		}
	}
	return nil
}

// leftCascades says which cascades an undelete took a resource out of:
// the catalog removes, with the undelete, its owner edges and cascade
// references through which a deletion in progress reached it.
func leftCascades(before, after *catalog.Resource) string {
	if before == nil || after == nil {
		return ""
	}
	var parts []string
	for _, o := range before.Owners {
		if !slices.ContainsFunc(after.Owners, func(x catalog.OwnerRef) bool { return x.UID == o.UID }) {
			parts = append(parts, "owner "+o.Kind+"/"+o.Name)
		}
	}
	for _, ref := range before.References {
		if !slices.Contains(after.References, ref) {
			parts = append(parts, "its cascade reference to "+catalog.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}.String())
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "it leaves the deletions in progress that reached it: " + strings.Join(parts, "; ") + " (removed, audited as " + catalog.AuditLeaveCascade + ")"
}

// undeletable refuses (exit 2, as finalize of a resource that is not
// Deleting) a resource that is not Scheduled.
func undeletable(r *catalog.Resource) error {
	switch r.Phase {
	case catalog.PhaseScheduled:
		return nil
	case catalog.PhaseDeleting:
		since := ""
		if r.DeletionTimestamp != nil {
			since = " (since " + r.DeletionTimestamp.Local().Format(time.RFC3339) + ")"
		}
		return usageError{fmt.Errorf("%s is already being deleted%s: its plugins have acted, so it cannot be undeleted", keyText(r.Key()), since)}
	}
	return usageError{fmt.Errorf("%s has no deletion scheduled (it is %s)", keyText(r.Key()), termtext.Quote(string(r.Phase)))}
}
