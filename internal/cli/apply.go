package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

func newApplyCmd(a *app) *cobra.Command {
	var files []string
	var dryRun bool
	c := &cobra.Command{
		Use:   "apply -f FILE|DIR|-",
		Short: "Create or update resources of any kind, and bundles, from manifests",
		Long: `Apply creates or updates catalog resources from manifests in Kubernetes
shape (kind, metadata, references, spec), as multi-document YAML or JSON,
read from a file, from every .yaml, .yml and .json file of a folder (in
name order), or from stdin (-f -).

Everything given is applied all or nothing: every document is checked
first (names, labels, policies; owners and block, unset and cascade targets
exist, in the catalog or in the same apply; no owner cycle), then all
creates and updates are written in one transaction. Applying the same
manifests again changes nothing ("unchanged"). metadata.resourceVersion,
when given, must be the stored one; a resource changed by someone else
between apply's read and its write fails the whole apply.

The sync filter: a resource that is Scheduled or Deleting is never
re-created or changed by apply. It is reported as skipped, and apply exits
with code 3.

A document of kind Bundle declares a set of resources (spec.resources:
[{name, object}]), each owned by the bundle. A member that leaves the
bundle's spec is pruned: with lethe.io/deletion-delay it is Scheduled and
counts down; otherwise it is deleted at once, with its cascade. A member
that comes back before its delay expires is adopted: Active again, its
countdown cancelled, its spec the desired one.`,
		Example: `  # Preview, then apply
  lethe apply -f shop.yaml --dry-run
  lethe apply -f shop.yaml

  # Every manifest of a folder, in name order, as one apply
  lethe apply -f manifests/

  # From stdin, with a report a script can read
  cat shop.yaml | lethe apply -f - -o json`,
		Args: exactArgs(0, ""),
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, folder, or - for stdin (repeatable; all are applied together)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be created, updated, adopted or pruned, and change nothing")
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		if len(files) == 0 {
			return usageError{errors.New("-f FILE|DIR|- is required: the manifests to apply")}
		}
		defer lowerMemoryLimit(applyMemoryLimit)()
		// Packed: every document is validated before the catalog is
		// opened, and unpacked only as the plan takes it.
		docs, err := a.loadPacked(files)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		// One transaction of up to tens of thousands of resources: with
		// the server's 64 MiB page cache, its pages stayed in memory
		// until the commit (about 100 MiB of the process for an 8 MiB
		// file). Beyond 2 MiB they spill to the write-ahead log.
		a.sqliteCacheKiB = applyCacheKiB
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		a.showEnforcePlans(ctx, st, docs.OfKind(manifest.KindRetentionPolicy))
		fed, err := a.federationConfig()
		if err != nil {
			return err
		}
		cfg := &apply.Config{Store: st, Pruner: &collectorPruner{a: a}, Federation: st}
		if fed != nil {
			cfg.Peers = func(name string) bool { _, ok := fed.Peer(name); return ok }
		}
		eng, err := apply.New(cfg)
		if err != nil {
			return err
		}
		opts := apply.Options{DryRun: dryRun}
		if docs.Len() >= applyBarFrom {
			bar := a.newBar(int64(docs.Len()), "reading the catalog", "resources", *out)
			opts.Progress = func(done, total int) {
				if bar != nil {
					bar.ChangeMax(total) // bundles add their members
					_ = bar.Set(done)
					if done == total {
						_ = bar.Finish()
						bar = nil
					}
				}
			}
		}
		res, err := eng.ApplyPacked(ctx, docs, opts)
		if res != nil {
			if perr := printApply(a, *out, res); perr != nil {
				return perr
			}
		}
		if ro := (*apply.ReadOnlyError)(nil); errors.As(err, &ro) {
			// A change apply cannot make (a Backup's spec, a member's
			// fields): bad input, nothing written.
			return usageError{err}
		}
		if err != nil {
			return gcError(err)
		}
		if n := res.Count(apply.Skipped); n > 0 {
			what := counted(n, "resource", "resources") + " pending deletion were left as they are"
			if n == 1 {
				what = "1 resource pending deletion was left as it is"
			}
			fmt.Fprintf(a.s.Err, "lethe: %s (sync filter); see the report\n", what)
			return errIncomplete
		}
		return nil
	}
	return c
}

// applyBarFrom is how many documents make apply show progress on a
// terminal: a smaller input is planned before a bar would be read.
const applyBarFrom = 100

// applyMemoryLimit is apply's soft memory limit for the Go runtime
// (cmd/lethe sets 80 MiB for every command) unless GOMEMLIMIT says
// otherwise. An apply of the largest file (8 MiB, 55,258 documents)
// holds about 40 MiB while it writes: at 80 MiB the heap grew to 66 MiB
// and the process to 119 MiB; at 60 MiB, with applyCacheKiB, it stays
// near 90 MiB (docs/security.md).
const applyMemoryLimit = 60 << 20

// lowerMemoryLimit lowers the Go runtime's soft memory limit to limit,
// unless GOMEMLIMIT is set or the limit is lower already, and returns
// what restores it.
func lowerMemoryLimit(limit int64) func() {
	prev := debug.SetMemoryLimit(-1)
	if os.Getenv("GOMEMLIMIT") != "" || prev <= limit {
		return func() {}
	}
	debug.SetMemoryLimit(limit)
	return func() { debug.SetMemoryLimit(prev) }
}

// applyCacheKiB is apply's SQLite writer page cache (see
// catalog.Config.SQLiteCacheKiB). SQLite's memory is outside the Go
// heap and its limit: an 8 MiB cache cost 13 MiB of peak RSS on the
// largest file, 2 MiB no more CPU (the pages spill to the write-ahead
// log).
const applyCacheKiB = 2 << 10

// collectorPruner prunes a bundle member without a delay through the
// garbage collector (Foreground): the member is queued for the collector,
// which runs its plugins, cascades to its dependents and purges it
// ('lethe server', or 'lethe delete KIND NAME --wait'). A member held by a
// block reference is refused, as 'lethe delete' refuses it, before apply
// writes anything (CheckDelete). The collector
// (and so the plugin host) is built only when something is pruned.
type collectorPruner struct {
	a   *app
	col *gc.Collector
}

func (p *collectorPruner) Delete(ctx context.Context, k catalog.Key) error {
	return p.delete(ctx, k, false)
}

// CheckDelete implements apply.PruneChecker: the collector's dry run
// (a block reference refuses the member) before apply writes anything.
func (p *collectorPruner) CheckDelete(ctx context.Context, k catalog.Key) error {
	return p.delete(ctx, k, true)
}

func (p *collectorPruner) delete(ctx context.Context, k catalog.Key, dryRun bool) error {
	if p.col == nil {
		col, err := p.a.collector(ctx)
		if err != nil {
			return err
		}
		p.col = col
	}
	_, err := p.col.Delete(ctx, k, gc.DeleteOptions{Propagation: gc.Foreground, DryRun: dryRun, Reason: "pruned from its bundle"})
	return err
}

// kindApplyReport is the kind of apply's report.
const kindApplyReport = "ApplyReport"

// applyReportView is apply -o json|yaml: one change per resource.
type applyReportView struct {
	DryRun  bool         `json:"dryRun"`
	Changes []changeView `json:"changes"`
}

// changeView is what apply did to one resource.
type changeView struct {
	Resource        view.Key      `json:"resource"`
	Action          apply.Action  `json:"action"`
	Source          string        `json:"source,omitempty"`
	Bundle          string        `json:"bundle,omitempty"`
	Member          string        `json:"member,omitempty"`
	Phase           catalog.Phase `json:"phase,omitempty"`
	ResourceVersion int64         `json:"resourceVersion,omitempty"`
	DueAt           *time.Time    `json:"dueAt,omitempty"`
	Reason          string        `json:"reason,omitempty"`
}

func newApplyReportView(res *apply.Result) applyReportView {
	v := applyReportView{DryRun: res.DryRun, Changes: []changeView{}}
	for _, c := range res.Changes {
		v.Changes = append(v.Changes, changeView{
			Resource: view.Key{Kind: c.Kind, Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			Action:   c.Action, Source: c.Source, Bundle: c.Bundle, Member: c.Member, Phase: c.Phase,
			ResourceVersion: c.ResourceVersion, DueAt: c.DueAt, Reason: c.Reason,
		})
	}
	return v
}

func printApply(a *app, format string, res *apply.Result) error {
	if structured(format) {
		return printObject(a.s.Out, format, kindApplyReport, newApplyReportView(res))
	}
	t := newTable(a.s.Out, "ACTION", "KIND", "NAMESPACE", "NAME", "DETAIL")
	for _, c := range res.Changes {
		var detail []string
		if c.Bundle != "" {
			detail = append(detail, c.Bundle)
		}
		if c.Action == apply.Scheduled && c.DueAt != nil {
			detail = append(detail, "due "+c.DueAt.UTC().Format(time.RFC3339))
		}
		if c.Reason != "" {
			detail = append(detail, c.Reason)
		}
		t.row(string(c.Action), termtext.Quote(c.Kind), termtext.Quote(dash(c.Namespace)), termtext.Quote(c.Name), termtext.Quote(dash(strings.Join(detail, "; "))))
	}
	if err := t.flush(); err != nil {
		return err
	}
	prefix := ""
	if res.DryRun {
		prefix = "Dry run, nothing changed: "
	}
	_, err := fmt.Fprintf(a.s.Out, "%s%s.\n", prefix, res.Summary())
	return err
}
