package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/retention"
	"github.com/lethehq/lethe/internal/retention/planner"
	"github.com/lethehq/lethe/internal/termtext"
)

func newRetentionCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "retention",
		Short: "Retention policies: what they keep and what they delete",
		Args:  exactArgs(0, ""),
	}
	c.AddCommand(newRetentionPlanCmd(a))
	return c
}

// retentionPlanJSON is the plan as -o json and -o yaml print it.
type retentionPlanJSON struct {
	APIVersion string                `json:"apiVersion"`
	Kind       string                `json:"kind"`
	Policies   []retentionPolicyJSON `json:"policies"`
	Items      []retentionItemJSON   `json:"items"`
	Warnings   []string              `json:"warnings,omitempty"`
}

type retentionPolicyJSON struct {
	Name   string `json:"name"`
	Mode   string `json:"mode"`
	Keep   int    `json:"keep"`
	Delete int    `json:"delete"`
}

type retentionItemJSON struct {
	Policy  string    `json:"policy"`
	Backup  string    `json:"backup"`
	Group   string    `json:"group"`
	Created time.Time `json:"created"`
	Phase   string    `json:"phase"`
	Action  string    `json:"action"`
	Reasons []string  `json:"reasons"`
}

func newRetentionPlanCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "plan [NAME]",
		Short: "Show what each RetentionPolicy keeps and deletes, and why; changes nothing",
		Long: `Plan evaluates the RetentionPolicies in the catalog (or only NAME) over
the backups that are not already pending deletion, and prints, for every
backup a policy selects, keep or delete with the reasons: the keep rules
that kept it (restic's forget rules: keepLast, keepDaily, ...; "(oldest)"
when a rule with counts left keeps the group's oldest backup), a hold
(lethe.io/retain=true), minSuccessful, an unfinished phase,
failedRetention, a postponement by maxDeletesPerRun, or another policy
that keeps it (a backup is deleted only if every policy selecting it says
delete).

The plan is the same whether the policy is in dryRun or enforce mode; it
never changes anything. A selector that matches no backup is a warning on
stderr.`,
		Example: `  lethe retention plan
  lethe retention plan nightly-gfs
  lethe retention plan nightly-gfs -o json | jq '.items[] | select(.action == "delete") | .backup'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("%s takes at most one policy NAME, got %d arguments", cmd.CommandPath(), len(args))}
			}
			return nil
		},
	}
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		var name string
		if len(args) == 1 {
			name = args[0]
			r, err := getResource(ctx, st, catalog.Key{Kind: manifest.KindRetentionPolicy, Name: name})
			if err != nil {
				return err
			}
			if r.Phase != catalog.PhaseActive {
				return exitCodeError{code: exitNotFound, err: fmt.Errorf("RetentionPolicy %q is being deleted (%s): it plans nothing", name, r.Phase)}
			}
		}
		res, err := planner.Build(ctx, st, time.Now())
		if errors.Is(err, planner.ErrNoPolicy) {
			return exitCodeError{code: exitNotFound, err: err}
		}
		if err != nil {
			return err
		}
		doc := retentionPlanJSON{APIVersion: "lethe.io/v1", Kind: "RetentionPlan", Items: []retentionItemJSON{}, Policies: []retentionPolicyJSON{}}
		for _, p := range res.Policies {
			if name != "" && p.Resource.Name != name {
				continue
			}
			del := p.Plan.Deletes()
			doc.Policies = append(doc.Policies, retentionPolicyJSON{Name: p.Resource.Name, Mode: p.Spec.Mode, Keep: len(p.Plan.Items) - del, Delete: del})
			doc.Warnings = append(doc.Warnings, p.Plan.Warnings...)
			for _, it := range p.Plan.Items {
				doc.Items = append(doc.Items, retentionItemJSON{Policy: it.Policy, Backup: it.Backup, Group: it.Group,
					Created: it.Created.UTC(), Phase: it.Phase, Action: string(it.Action), Reasons: it.Reasons})
			}
		}
		for _, w := range doc.Warnings {
			fmt.Fprintf(a.s.Err, "lethe: warning: %s\n", termtext.Quote(w))
		}
		if structured(*out) {
			return printObject(a.s.Out, *out, "RetentionPlan", doc)
		}
		return printRetentionPlan(a, doc)
	}
	return c
}

func printRetentionPlan(a *app, doc retentionPlanJSON) error {
	t := newTable(a.s.Out, "POLICY", "GROUP", "BACKUP", "CREATED", "PHASE", "ACTION", "REASONS")
	for _, it := range doc.Items {
		t.row(termtext.Quote(it.Policy), termtext.Quote(dash(it.Group)), termtext.Quote(it.Backup), it.Created.Format(time.RFC3339),
			termtext.Quote(dash(it.Phase)), it.Action, termtext.Quote(strings.Join(it.Reasons, "; ")))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, p := range doc.Policies {
		what := "plan only (mode dryRun): nothing is deleted"
		if p.Mode == manifest.ModeEnforce {
			what = "mode enforce: 'lethe server' schedules the deletions"
		}
		if _, err := fmt.Fprintf(a.s.Out, "RetentionPolicy %s: keep %d, delete %d; %s.\n", termtext.Quote(p.Name), p.Keep, p.Delete, what); err != nil {
			return err
		}
	}
	return nil
}

// showEnforcePlans prints on stderr, before apply writes anything, the
// plan of each RetentionPolicy that the apply switches to mode enforce
// (new in enforce, or stored in dryRun): what 'lethe server' will then
// schedule for deletion. It changes nothing and stops nothing; a plan
// that cannot be built is a warning.
func (a *app) showEnforcePlans(ctx context.Context, st planner.Store, docs []*manifest.Document) {
	var desired []*manifest.RetentionPolicy
	var switching []string
	for _, d := range docs {
		if d.Kind != manifest.KindRetentionPolicy {
			continue
		}
		rp, err := manifest.ParseRetentionPolicy(d)
		if err != nil {
			return // apply refuses it with its own message
		}
		desired = append(desired, rp)
		if rp.Mode != manifest.ModeEnforce {
			continue
		}
		cur, err := st.Get(ctx, d.Key())
		if err == nil {
			if old, err := manifest.RetentionPolicyFromResource(cur.Name, cur.Spec); err == nil && old.Mode == manifest.ModeEnforce {
				continue
			}
		}
		switching = append(switching, rp.Policy.Name)
	}
	if len(switching) == 0 {
		return
	}
	res, err := planner.BuildWith(ctx, st, time.Now(), desired)
	if err != nil {
		fmt.Fprintf(a.s.Err, "lethe: warning: the plan of the policies switched to enforce could not be computed: %s\n", termtext.Quote(err.Error()))
		return
	}
	for _, name := range switching {
		p := res.Get(name)
		if p == nil {
			continue
		}
		var del []string
		for _, it := range p.Plan.Items {
			if it.Action == retention.Delete {
				del = append(del, it.Backup)
			}
		}
		fmt.Fprintf(a.s.Err, "lethe: RetentionPolicy %s switches to enforce: keep %d, delete %d", termtext.Quote(name), len(p.Plan.Items)-len(del), len(del))
		const shown = 10
		if len(del) > 0 {
			more := ""
			if len(del) > shown {
				more = fmt.Sprintf(" and %d more", len(del)-shown)
				del = del[:shown]
			}
			fmt.Fprintf(a.s.Err, " (%s%s)", termtext.Quote(strings.Join(del, ", ")), more)
		}
		fmt.Fprintf(a.s.Err, "; 'lethe retention plan %s' shows every backup and why\n", termtext.Quote(name))
		for _, w := range p.Plan.Warnings {
			fmt.Fprintf(a.s.Err, "lethe: warning: %s\n", termtext.Quote(w))
		}
	}
}
