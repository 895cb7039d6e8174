package cli

import (
	"context"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/view"
)

// kindWatchEvent is the kind of what get -w and backup list -w print for
// each change with -o json|yaml (docs/output.md).
const kindWatchEvent = "WatchEvent"

// Watch event types, as Kubernetes names them.
const (
	watchAdded    = "ADDED"
	watchModified = "MODIFIED"
	watchDeleted  = "DELETED"
)

// watchEventView is one change: its type, and the object as get prints
// it (for DELETED, its last state).
type watchEventView struct {
	Type   string      `json:"type"`
	Object view.Object `json:"object"`
}

// watchFlags are -w/--watch and --watch-only.
type watchFlags struct {
	watch, only bool
}

func (w *watchFlags) add(c *cobra.Command) {
	c.Flags().BoolVarP(&w.watch, "watch", "w", false, "after listing, print each change as it happens, until interrupted (Ctrl-C)")
	c.Flags().BoolVar(&w.only, "watch-only", false, "print only the changes, not the list first (implies --watch)")
}

func (w *watchFlags) on() bool { return w.watch || w.only }

// watchFilter is what a watch prints: a namespace, a name, a selector.
type watchFilter struct {
	namespace string
	name      string
	selector  labels.Selector
}

func newWatchFilter(namespace, name, selector string) (watchFilter, error) {
	f := watchFilter{namespace: namespace, name: name, selector: labels.Everything()}
	if selector != "" {
		s, err := labels.Parse(selector)
		if err != nil {
			return f, checkSelector(selector)
		}
		f.selector = s
	}
	return f, nil
}

func (f watchFilter) match(r *catalog.Resource) bool {
	return (f.namespace == "" || r.Namespace == f.namespace) && (f.name == "" || r.Name == f.name) &&
		f.selector.Matches(labels.Set(r.Labels))
}

// watchPrinter prints one event: typ is ADDED, MODIFIED or DELETED;
// purged says that a DELETED resource is gone (not only out of the
// selector), and r is its last state.
type watchPrinter func(typ string, r *catalog.Resource, purged bool) error

// watchFrom prints initial (the listing, as ADDED; none with
// --watch-only), then every change of kind after version from that f
// selects, until ctx ends (Ctrl-C: exit 0). from is the catalog's version
// read before the listing: a change the listing already shows is not
// printed again. A resource that stops matching the selector is DELETED,
// one that starts matching ADDED, as a Kubernetes watch reports them.
func (a *app) watchFrom(ctx context.Context, st catalog.Store, kind string, from int64, f watchFilter,
	initial []*catalog.Resource, print watchPrinter) error {
	a.aborts.quiet.Store(true)  // Ctrl-C is how a watch ends: no "stopping" line
	shown := map[string]int64{} // uid: the version printed last
	for _, r := range initial {
		shown[r.UID] = r.ResourceVersion
		if err := print(watchAdded, r, false); err != nil {
			return err
		}
	}
	sub, err := st.Watch(ctx, catalog.WatchOptions{FromVersion: from, Kind: kind})
	if err != nil {
		return stopped(ctx, err)
	}
	defer sub.Close()
	for ev := range sub.Events() {
		r := ev.Resource
		last, was := shown[r.UID]
		if was && ev.Version <= last {
			continue // the listing showed this change or a later one
		}
		typ := watchModified
		switch {
		case ev.Type == catalog.EventDeleted:
			if !was && !f.match(r) {
				continue
			}
			typ = watchDeleted
			delete(shown, r.UID)
		case !f.match(r):
			if !was {
				continue
			}
			typ = watchDeleted // it left the selection
			delete(shown, r.UID)
		default:
			if !was {
				typ = watchAdded
			}
			shown[r.UID] = ev.Version
		}
		if err := print(typ, r, ev.Type == catalog.EventDeleted); err != nil {
			return err
		}
	}
	return stopped(ctx, sub.Err())
}

// stopped is nil when ctx ended (the user stopped the watch), else err.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// printWatchEvent prints one event in a structured format: -o json|yaml
// a WatchEvent (YAML documents separated by ---), -o name the object's
// kind/name, -o jsonpath the template over the WatchEvent.
func printWatchEvent(w io.Writer, format, typ string, obj view.Object) error {
	if format == outName {
		return printFormatted(w, format, obj)
	}
	if format == outYAML {
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
	}
	return printObject(w, format, kindWatchEvent, watchEventView{Type: typ, Object: obj})
}

// streamTable prints a table row by row as a watch finds them, every row
// aligned with the header above it: the first print is the header and the
// listing, and sets the widths (each column at least its floor, so that
// the usual later rows fit); a later row with a cell wider than its
// column (the last column excepted: nothing follows it) widens the
// columns and prints the header again above it, instead of shifting that
// row away from the header (a pipe reads the header as a new table).
type streamTable struct {
	w      io.Writer
	header []string
	widths []int
}

// streamFloors are the least widths of the watched tables' columns: what
// their usual values take (a phase with deletion progress, an age, a
// uid).
var streamFloors = map[string]int{
	"NAMESPACE": 12, "NAME": 24, "PHASE": 18, "OWNERS": 6, "FINALIZERS": 18, "AGE": 6,
	"UID": 36, "VERSION": 7, "ITEMS": 6, "SIZE": 9, "EXPIRES": 12,
}

// print writes rows; the first call's first row is the header.
func (t *streamTable) print(rows ...[]string) error {
	var b strings.Builder
	if t.header == nil && len(rows) > 0 {
		t.header, rows = rows[0], rows[1:]
		for _, h := range t.header {
			t.widths = append(t.widths, max(streamFloors[h], utf8.RuneCountInString(h)))
		}
		t.widen(rows...)
		t.line(&b, t.header)
	}
	for _, row := range rows {
		if t.widen(row) {
			t.line(&b, t.header)
		}
		t.line(&b, row)
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}

// widen makes the columns as wide as the cells of rows, and reports
// whether one had to grow.
func (t *streamTable) widen(rows ...[]string) bool {
	grew := false
	for _, row := range rows {
		for i, c := range row {
			if i >= len(t.widths) || i == len(t.header)-1 {
				continue // past the header, or the last column: no column follows it
			}
			if n := utf8.RuneCountInString(c); n > t.widths[i] {
				t.widths[i], grew = n, true
			}
		}
	}
	return grew
}

// line writes one row, three spaces between columns (as table's).
func (t *streamTable) line(b *strings.Builder, row []string) {
	for i, c := range row {
		b.WriteString(c)
		if i < len(row)-1 {
			w := utf8.RuneCountInString(c)
			if i < len(t.widths) {
				w = t.widths[i]
			}
			b.WriteString(strings.Repeat(" ", w-utf8.RuneCountInString(c)+3))
		}
	}
	b.WriteByte('\n')
}

// purgedCopy is r as a text row shows it once purged: phase Purged.
func purgedCopy(r *catalog.Resource, purged bool) *catalog.Resource {
	if !purged {
		return r
	}
	c := *r
	c.Phase = catalog.PhasePurged
	c.Conditions = nil
	return &c
}
