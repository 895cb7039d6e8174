package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

func newGetCmd(a *app) *cobra.Command {
	var ns, selector string
	c := &cobra.Command{
		Use:   "get KIND [NAME]",
		Short: "List resources of any kind in the catalog, or show one",
		Long: `Get lists the catalog's resources of one kind (Backup, or any user-defined
kind), with their lifecycle phase. With NAME it shows that one resource in
full (-o yaml or json for everything, including spec and status).

KIND is resolved as kubectl resolves a resource type: in any case, singular
or plural (Database, databases), and Lethe's own kinds by their short names
(backup, backups, bk; bundle, bundles; backupstoragelocations, bsl). A kind
the catalog has never held exits 4 with the nearest known name, or the kind
it abbreviates (db: Database). A NAME with -l/--selector is exit 2.

-o yaml prints a manifest (apiVersion lethe.io/v1, kind, metadata, spec,
status, and Lethe's read-only lifecycle) that 'lethe apply -f -' takes back
unchanged; a list is a <Kind>List. -o name, -o wide and -o jsonpath=...
work as kubectl's (docs/output.md).

Listing: without -n (or with -A/--all-namespaces) every namespace is
listed; --show-labels adds a LABELS column; --sort-by=JSONPATH sorts by a
field of each object, as kubectl's (--sort-by=.spec.size, '{.metadata.name}').
Without -n, a NAME that exists only in namespaces is not found (exit 4),
and the error names those namespaces.

-w/--watch lists, then prints each change as it happens (a row, or with
-o json|yaml one WatchEvent {type: ADDED|MODIFIED|DELETED, object}) until
interrupted; Ctrl-C ends it with exit 0. It reads the catalog's change feed:
PostgreSQL's NOTIFY, or on SQLite the database file's writes.`,
		Example: `  lethe get backups
  lethe get backups -l team=db -o json
  lethe get Backup nightly-0412 -o yaml
  lethe get databases -o name
  lethe get databases -A --show-labels --sort-by=.metadata.creationTimestamp
  lethe get Database orders -n shop -o yaml | lethe apply -f -
  lethe get bk -o jsonpath='{.items[*].metadata.name}'
  lethe get databases -n shop -w
  lethe get backup nightly-0412 -w -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageError{fmt.Errorf("%s needs KIND and at most one NAME", cmd.CommandPath())}
			}
			return nil
		},
	}
	out := outputFlag(c, "table")
	c.Flags().StringVarP(&ns, "namespace", "n", "", "namespace (empty: cluster-scoped, or all when listing)")
	c.Flags().StringVarP(&selector, "selector", "l", "", "label selector, e.g. team=db,env!=dev")
	var w watchFlags
	w.add(c)
	var g getFlags
	g.add(c)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		if err := g.check(ns, args); err != nil {
			return err
		}
		if err := checkNameAndSelector(len(args) == 2, selector); err != nil {
			return err
		}
		ctx := cmd.Context()
		a.fileWake = w.on() // before the catalog opens: see catalog.Config.FileWake
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		name := "x" // listing: only the namespace is checked
		if len(args) == 2 {
			name = args[1]
		}
		if err := validateKey(catalog.Key{Kind: kindName(args[0]), Namespace: ns, Name: name}); err != nil {
			return err
		}
		if err := checkSelector(selector); err != nil {
			return err
		}
		kind, err := resolveKind(ctx, st, args[0])
		if err != nil {
			return err
		}
		var from int64
		if w.on() {
			if from, err = st.CurrentVersion(ctx); err != nil {
				return err
			}
		}
		var items []*catalog.Resource
		if len(args) == 2 {
			r, err := getResource(ctx, st, catalog.Key{Kind: kind, Namespace: ns, Name: args[1]})
			if err != nil {
				return withNamespaceHint(ctx, st, err)
			}
			items = []*catalog.Resource{r}
		} else {
			if items, err = listAll(ctx, st, catalog.ListOptions{Kind: kind, Namespace: ns, LabelSelector: selector}); err != nil {
				return err
			}
			if err := a.sortResources(ctx, kind, items, g.sortBy); err != nil {
				return err
			}
		}
		cols := columns{wide: *out == outWide, labels: g.showLabels}
		if w.on() {
			return a.watchResources(ctx, st, *out, cols, kind, from, ns, args[1:], selector, items, w.only)
		}
		if structured(*out) {
			return a.printResources(ctx, *out, kind, items, len(args) == 2)
		}
		if len(items) == 0 {
			fmt.Fprintf(a.s.Out, "No %s resources.\n", termtext.Quote(kind))
			return nil
		}
		now := time.Now()
		t := newTable(a.s.Out, resourceHeaders(cols)...)
		for _, r := range items {
			t.row(resourceRow(r, cols, now)...)
		}
		return t.flush()
	}
	return c
}

// columns are the columns of get's table: -o wide adds UID, VERSION and
// LABELS; --show-labels adds LABELS.
type columns struct{ wide, labels bool }

// resourceHeaders are get's columns.
func resourceHeaders(c columns) []string {
	headers := []string{"NAMESPACE", "NAME", "PHASE", "OWNERS", "FINALIZERS", "AGE"}
	if c.wide {
		headers = append(headers, "UID", "VERSION")
	}
	if c.wide || c.labels {
		headers = append(headers, "LABELS")
	}
	return headers
}

// resourceRow is r's row in get's table.
func resourceRow(r *catalog.Resource, c columns, now time.Time) []string {
	row := []string{termtext.Quote(dash(r.Namespace)), termtext.Quote(r.Name), termtext.Quote(string(r.Phase) + blockingConditions(r.Conditions)), fmt.Sprint(len(r.Owners)),
		dash(strings.Join(quoteAll(r.Finalizers), ",")), human(now.Sub(r.CreatedAt))}
	if c.wide {
		row = append(row, termtext.Quote(r.UID), fmt.Sprint(r.ResourceVersion))
	}
	if c.wide || c.labels {
		row = append(row, dash(joinMap(r.Labels)))
	}
	return row
}

// watchResources is get -w: the listing (unless only), then each change
// of the kind that the namespace, name and selector select.
func (a *app) watchResources(ctx context.Context, st catalog.Store, format string, cols columns, kind string, from int64, ns string, name []string,
	selector string, items []*catalog.Resource, only bool) error {
	f, err := newWatchFilter(ns, "", selector)
	if err != nil {
		return err
	}
	if len(name) == 1 {
		f.name = name[0]
	}
	if only {
		items = nil
	}
	t := &streamTable{w: a.s.Out}
	if !structured(format) {
		rows := [][]string{resourceHeaders(cols)}
		for _, r := range items {
			rows = append(rows, resourceRow(r, cols, time.Now()))
		}
		if err := t.print(rows...); err != nil {
			return err
		}
		items = nil
	}
	return a.watchFrom(ctx, st, kind, from, f, items, func(typ string, r *catalog.Resource, purged bool) error {
		if !structured(format) {
			return t.print(resourceRow(purgedCopy(r, purged), cols, time.Now()))
		}
		obj, err := a.resourceObject(ctx, r)
		if err != nil {
			return err
		}
		return printWatchEvent(a.s.Out, format, typ, obj)
	})
}

// printResources prints get's objects: one (single) or a list. A backup
// is the object backup get prints.
func (a *app) printResources(ctx context.Context, format, kind string, items []*catalog.Resource, single bool) error {
	var objs any
	if kind == backup.Kind {
		views := make([]*view.BackupObject, 0, len(items))
		for _, r := range items {
			v, err := a.backupView(ctx, r, single)
			if err != nil {
				return err
			}
			views = append(views, v.Object())
		}
		objs = views
		if single {
			return printObject(a.s.Out, format, kind, views[0])
		}
	} else {
		views := make([]*view.Resource, 0, len(items))
		for _, r := range items {
			views = append(views, view.NewResource(r))
		}
		objs = views
		if single {
			return printObject(a.s.Out, format, kind, views[0])
		}
	}
	return printList(a.s.Out, format, kind, objs)
}

// resourceObject is r's object, as get prints it.
func (a *app) resourceObject(ctx context.Context, r *catalog.Resource) (view.Object, error) {
	return view.ObjectOf(ctx, a.store, r, true)
}

// listAll reads every page of a listing.
func listAll(ctx context.Context, st catalog.Resources, opts catalog.ListOptions) ([]*catalog.Resource, error) {
	var out []*catalog.Resource
	for {
		page, err := st.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// getResource reads one resource; a missing or purged one is a
// *backup.NotFoundError (exit code 4), worded as every command words it.
func getResource(ctx context.Context, st backup.Reader, k catalog.Key) (*catalog.Resource, error) {
	return backup.Get(ctx, st, k)
}

// DescriptionKind is the kind of describe's JSON.
const DescriptionKind = "Description"

// descriptionView is describe -o json|yaml: the resource, what depends
// on it, and its recent audit.
type descriptionView struct {
	// Resource is the resource's object, as get prints it.
	Resource view.Object `json:"resource"`
	// References are the resource's own references, each with its
	// target's phase, or dangling when the target is gone.
	References []gc.ReferenceState `json:"references"`
	// Owners are its owner references, each with its owner's phase, or
	// gone when the owner no longer exists.
	Owners     []gc.OwnerState `json:"owners"`
	Dependents []dependentView `json:"dependents"`
	Audit      []view.Object   `json:"audit"`
}

// dependentView is one resource that depends on the described one.
type dependentView struct {
	Kind           string        `json:"kind"`
	Namespace      string        `json:"namespace,omitempty"`
	Name           string        `json:"name"`
	Phase          catalog.Phase `json:"phase"`
	Relation       string        `json:"relation"` // "owned" or "references"
	OnTargetDelete string        `json:"onTargetDelete,omitempty"`
}

// referencePolicy is the onTargetDelete of d's reference to r.
func referencePolicy(d, r *catalog.Resource) string {
	policy := ""
	for _, ref := range d.References {
		if ref.Kind == r.Kind && ref.Name == r.Name && ref.Namespace == r.Namespace {
			policy = string(ref.OnTargetDelete)
		}
	}
	return policy
}

func newAuditCmd(a *app) *cobra.Command {
	var kind, ns, name, since string
	var limit int
	c := &cobra.Command{
		Use:   "audit",
		Short: "List the append-only audit log: every lifecycle change and purge",
		Long: `Audit lists who changed what, when and why: every lifecycle transition
(schedule, undelete, delete, finalizer removal) and every purge, forced or
not, with the plugins' report for purged backups. The log is append-only.`,
		Example: `  lethe audit --kind Backup --name nightly-0412
  lethe audit --kind Service --name web -n shop
  lethe audit --since 24h -o json`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.Flags().StringVar(&kind, "kind", "", "only this kind")
	c.Flags().StringVarP(&ns, "namespace", "n", "", "only this namespace (empty: every namespace, and cluster-scoped resources)")
	c.Flags().StringVar(&name, "name", "", "only this name")
	c.Flags().StringVar(&since, "since", "", "only entries newer than a duration ago (24h, 7d) or a time (RFC 3339)")
	c.Flags().IntVar(&limit, "limit", 0, "at most this many entries (the newest)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		if ns != "" {
			if err := validateKey(catalog.Key{Kind: "x", Namespace: ns, Name: "x"}); err != nil {
				return err
			}
		}
		f := catalog.AuditFilter{Namespace: ns, Name: name, Limit: limit}
		if since != "" {
			if t, err := time.Parse(time.RFC3339, since); err == nil {
				f.Since = t
			} else if d, err := backup.ParseDuration(since); err == nil {
				f.Since = time.Now().Add(-d)
			} else {
				return usageError{fmt.Errorf("--since %q: use a duration (24h, 7d) or an RFC 3339 time", since)}
			}
		}
		if limit < 0 {
			return usageError{fmt.Errorf("--limit must not be negative")}
		}
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		if kind != "" {
			if f.Kind, err = resolveKind(ctx, st, kind); err != nil {
				return err
			}
		}
		entries, err := st.ListAudit(ctx, f)
		if err != nil {
			return err
		}
		if structured(*out) {
			return printList(a.s.Out, *out, view.AuditEntryKind, view.AuditEntries(entries))
		}
		if len(entries) == 0 {
			fmt.Fprintln(a.s.Out, "No audit entries.")
			return nil
		}
		t := newTable(a.s.Out, "TIME", "ACTOR", "ACTION", "RESOURCE", "PHASE", "REASON")
		for _, e := range entries {
			res := e.Kind + "/" + e.Name
			if e.Namespace != "" {
				res = e.Kind + "/" + e.Namespace + "/" + e.Name
			}
			phase := ""
			if e.FromPhase != "" || e.ToPhase != "" {
				phase = string(e.FromPhase) + "→" + string(e.ToPhase)
			}
			t.row(e.Time.Local().Format(time.RFC3339), termtext.Quote(e.Actor), termtext.Quote(e.Action), termtext.Quote(res), termtext.Quote(dash(phase)), termtext.Quote(e.Reason))
		}
		return t.flush()
	}
	return c
}
