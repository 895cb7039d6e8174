package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

// maxDescribed is how many resources describe KIND (no NAME) describes
// at most; the others are counted in a warning.
const maxDescribed = 100

func newDescribeCmd(a *app) *cobra.Command {
	var ns, selector string
	c := &cobra.Command{
		Use:   "describe KIND [NAME]",
		Short: "Show a resource with its owners, dependents, references, finalizers, conditions and recent audit",
		Long: fmt.Sprintf(`Describe shows one resource: its lifecycle, owners, finalizers and
conditions; what depends on it (dependents, and referrers with their
onTargetDelete policy); its own references, each with its target's phase,
or "dangling" when the target is gone (an allowDangling reference stays
when its target is deleted); and its recent audit entries.

Without NAME it describes every resource of KIND (in -n's namespace, or
in all), or those -l/--selector selects, as kubectl describe KIND does:
one after the other, separated by a blank line (-o json|yaml: a
DescriptionList). At most %d are described; the others are counted in a
warning on stderr (narrow with -n or -l). A NAME and -l cannot be given
together.`, maxDescribed),
		Example: `  lethe describe backup nightly-0412
  lethe describe Database orders -n shop
  lethe describe databases -n shop
  lethe describe databases -l team=db
  lethe describe backup nightly-0412 -o json
  lethe describe Report weekly -n shop -o json   # references[].dangling`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageError{fmt.Errorf("%s needs KIND and at most one NAME", cmd.CommandPath())}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&ns, "namespace", "n", "", "namespace (empty: cluster-scoped, or all without NAME)")
	c.Flags().StringVarP(&selector, "selector", "l", "", "without NAME: describe the resources of KIND this label selector selects, e.g. team=db")
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		if err := checkNameAndSelector(len(args) == 2, selector); err != nil {
			return err
		}
		name := "x" // several: only the namespace is checked
		if len(args) == 2 {
			name = args[1]
		}
		if err := validateKey(catalog.Key{Kind: kindName(args[0]), Namespace: ns, Name: name}); err != nil {
			return err
		}
		if err := checkSelector(selector); err != nil {
			return err
		}
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		kind, err := resolveKind(ctx, st, args[0])
		if err != nil {
			return err
		}
		var items []*catalog.Resource
		if len(args) == 2 {
			r, err := getResource(ctx, st, catalog.Key{Kind: kind, Namespace: ns, Name: args[1]})
			if err != nil {
				return withNamespaceHint(ctx, st, err)
			}
			items = []*catalog.Resource{r}
		} else if items, err = listAll(ctx, st, catalog.ListOptions{Kind: kind, Namespace: ns, LabelSelector: selector}); err != nil {
			return err
		}
		if len(items) > maxDescribed {
			fmt.Fprintf(a.s.Err, "Warning: %d more %s resources not described (at most %d): narrow with -n or -l\n", len(items)-maxDescribed, termtext.Quote(kind), maxDescribed)
			items = items[:maxDescribed]
		}
		var views []descriptionView
		for i, r := range items {
			d, err := a.describeData(ctx, st, r)
			if err != nil {
				return err
			}
			if structured(*out) {
				v, err := a.descriptionObject(ctx, d)
				if err != nil {
					return err
				}
				views = append(views, v)
				continue
			}
			if i > 0 {
				fmt.Fprintln(a.s.Out)
			}
			a.printDescription(d)
		}
		switch {
		case structured(*out) && len(args) == 2:
			return printObject(a.s.Out, *out, DescriptionKind, views[0])
		case structured(*out):
			return printList(a.s.Out, *out, DescriptionKind, views)
		case len(items) == 0:
			fmt.Fprintf(a.s.Out, "No %s resources.\n", termtext.Quote(kind))
		}
		return nil
	}
	return c
}

// described is what describe shows of one resource.
type described struct {
	r      *catalog.Resource
	deps   []*catalog.Resource
	refs   []*catalog.Resource
	audit  []catalog.AuditEntry
	myRefs []gc.ReferenceState
	owners []gc.OwnerState
}

// describeData reads what describe shows of r: its dependents,
// referrers, last 10 audit entries, references and owners.
func (a *app) describeData(ctx context.Context, st catalog.Store, r *catalog.Resource) (*described, error) {
	d := &described{r: r}
	var err error
	if d.deps, err = st.Dependents(ctx, r.UID); err != nil {
		return nil, err
	}
	if d.refs, err = st.Referrers(ctx, r.Key()); err != nil {
		return nil, err
	}
	if d.audit, err = st.ListAudit(ctx, catalog.AuditFilter{UID: r.UID}); err != nil {
		return nil, err
	}
	if len(d.audit) > 10 {
		d.audit = d.audit[len(d.audit)-10:]
	}
	if d.myRefs, err = gc.References(ctx, st, r); err != nil {
		return nil, err
	}
	if d.owners, err = gc.Owners(ctx, st, r); err != nil {
		return nil, err
	}
	return d, nil
}

// descriptionObject is describe -o json|yaml's Description of d.
func (a *app) descriptionObject(ctx context.Context, d *described) (descriptionView, error) {
	v := descriptionView{References: d.myRefs, Owners: d.owners, Dependents: []dependentView{}}
	var err error
	if v.Resource, err = a.resourceObject(ctx, d.r); err != nil {
		return v, err
	}
	if v.Audit, err = view.ToObjects(view.AuditEntryKind, view.AuditEntries(d.audit)); err != nil {
		return v, err
	}
	for _, x := range d.deps {
		v.Dependents = append(v.Dependents, dependentView{Kind: x.Kind, Namespace: x.Namespace, Name: x.Name, Phase: x.Phase, Relation: "owned"})
	}
	for _, x := range d.refs {
		v.Dependents = append(v.Dependents, dependentView{Kind: x.Kind, Namespace: x.Namespace, Name: x.Name, Phase: x.Phase,
			Relation: "references", OnTargetDelete: referencePolicy(x, d.r)})
	}
	return v, nil
}

// printDescription is describe's text for d.
func (a *app) printDescription(d *described) {
	w := a.s.Out
	now := time.Now()
	fmt.Fprintf(w, "Kind:        %s\n", termtext.Quote(d.r.Kind))
	if d.r.Namespace != "" {
		fmt.Fprintf(w, "Namespace:   %s\n", termtext.Quote(d.r.Namespace))
	}
	fmt.Fprintf(w, "Name:        %s\n", termtext.Quote(d.r.Name))
	fmt.Fprintf(w, "UID:         %s\n", termtext.Quote(d.r.UID))
	fmt.Fprintf(w, "Phase:       %s\n", termtext.Quote(string(d.r.Phase)))
	fmt.Fprintf(w, "Version:     %d\n", d.r.ResourceVersion)
	fmt.Fprintf(w, "Created:     %s (%s ago)\n", d.r.CreatedAt.Local().Format(time.RFC3339), human(now.Sub(d.r.CreatedAt)))
	if len(d.r.Labels) > 0 {
		fmt.Fprintf(w, "Labels:      %s\n", joinMap(d.r.Labels))
	}
	if len(d.r.Annotations) > 0 {
		fmt.Fprintf(w, "Annotations: %s\n", joinMap(d.r.Annotations))
	}
	if d.r.DeletionDueAt != nil {
		fmt.Fprintf(w, "Deletion:    scheduled for %s (in %s)\n", d.r.DeletionDueAt.Local().Format(time.RFC3339), human(d.r.DeletionDueAt.Sub(now)))
	}
	if d.r.DeletionTimestamp != nil {
		fmt.Fprintf(w, "Deleting:    since %s, propagation %s\n", d.r.DeletionTimestamp.Local().Format(time.RFC3339), termtext.Quote(dash(string(d.r.PropagationPolicy))))
	}
	if d.r.DeletionRoot != nil {
		fmt.Fprintf(w, "Cascade of:  %s %s (the requested deletion whose cascade reached this one)\n", keyText(d.r.DeletionRoot.Key()), termtext.Quote(d.r.DeletionRoot.UID))
	}
	fmt.Fprintf(w, "Finalizers:  %s\n", dash(strings.Join(quoteAll(d.r.Finalizers), ", ")))
	fmt.Fprintln(w, "Owners:")
	if len(d.r.Owners) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, o := range d.owners {
		block := ""
		if o.BlockOwnerDeletion {
			block = " (blocks owner deletion)"
		}
		state := ", " + termtext.Quote(string(o.Phase))
		if o.Gone {
			state = ", gone (no longer exists)"
		}
		fmt.Fprintf(w, "  %s %s%s%s\n", termtext.Quote(o.Kind+"/"+o.Name), termtext.Quote(o.UID), block, state)
	}
	fmt.Fprintln(w, "Dependents:")
	if len(d.deps)+len(d.refs) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, x := range d.deps {
		fmt.Fprintf(w, "  %s  owned, %s\n", keyText(x.Key()), termtext.Quote(string(x.Phase)))
	}
	for _, x := range d.refs {
		fmt.Fprintf(w, "  %s  references it (onTargetDelete=%s), %s\n", keyText(x.Key()), termtext.Quote(referencePolicy(x, d.r)), termtext.Quote(string(x.Phase)))
	}
	fmt.Fprintln(w, "References:")
	if len(d.myRefs) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, ref := range d.myRefs {
		state := "target " + termtext.Quote(string(ref.TargetPhase))
		if ref.Dangling {
			state = "dangling (target gone)"
		}
		fmt.Fprintf(w, "  %s  onTargetDelete=%s, %s\n", keyText(catalog.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}), termtext.Quote(string(ref.OnTargetDelete)), state)
	}
	fmt.Fprintln(w, "Conditions:")
	if len(d.r.Conditions) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, c := range d.r.Conditions {
		fmt.Fprintf(w, "  %s\n", conditionText(c))
	}
	fmt.Fprintln(w, "Recent audit:")
	for _, e := range d.audit {
		fmt.Fprintf(w, "  %s  %-16s %-10s %s\n", e.Time.Local().Format(time.RFC3339), termtext.Quote(e.Action), termtext.Quote(e.Actor), termtext.Quote(e.Reason))
	}
}
