package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/util/jsonpath"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

// getFlags are get's listing flags, as kubectl's: -A/--all-namespaces,
// --show-labels and --sort-by.
type getFlags struct {
	all        bool
	showLabels bool
	sortBy     string
}

func (g *getFlags) add(c *cobra.Command) {
	c.Flags().BoolVarP(&g.all, "all-namespaces", "A", false, "list KIND in every namespace (what a listing without -n does); not with -n or NAME")
	c.Flags().BoolVar(&g.showLabels, "show-labels", false, "add a LABELS column to the table (-o wide has it)")
	c.Flags().StringVar(&g.sortBy, "sort-by", "", "sort the listing by a JSONPath over each object, as kubectl's: '{.metadata.name}', .lifecycle.updatedAt, .spec.size")
}

// check refuses -A with -n or with NAME, and a --sort-by that does not
// parse, before anything runs.
func (g *getFlags) check(ns string, args []string) error {
	switch {
	case g.all && ns != "":
		return usageError{fmt.Errorf("-A/--all-namespaces lists every namespace: give it or -n %s, not both", termtext.Quote(ns))}
	case g.all && len(args) == 2:
		return usageError{errors.New("-A/--all-namespaces lists a kind: leave out NAME, or name its namespace with -n")}
	}
	if g.sortBy != "" {
		if _, err := sortPath(g.sortBy); err != nil {
			return usageError{fmt.Errorf("--sort-by %s: %v", termtext.Quote(g.sortBy), err)}
		}
	}
	return nil
}

// sortPath parses a --sort-by expression as kubectl does: a template
// ({.metadata.name}) or a bare path (.metadata.name, metadata.name).
func sortPath(expr string) (*jsonpath.JSONPath, error) {
	tmpl := strings.TrimSpace(expr)
	if !strings.HasPrefix(tmpl, "{") {
		if !strings.HasPrefix(tmpl, ".") {
			tmpl = "." + tmpl
		}
		tmpl = "{" + tmpl + "}"
	}
	jp, err := parseJSONPath(tmpl)
	if err != nil {
		return nil, err
	}
	jp.AllowMissingKeys(true) // an object without the field sorts first, as kubectl's
	return jp, nil
}

// sortResources sorts items (stably) by the value of expr in each one's
// object, as get -o json prints it: numbers by value, times as times,
// other values as their text; an object without the field comes first.
// An empty expr leaves items as listed.
func (a *app) sortResources(ctx context.Context, kind string, items []*catalog.Resource, expr string) error {
	if expr == "" || len(items) < 2 {
		return nil
	}
	jp, err := sortPath(expr)
	if err != nil {
		return usageError{fmt.Errorf("--sort-by: %v", err)}
	}
	keys := make(map[*catalog.Resource]any, len(items))
	for _, r := range items {
		var obj any = view.NewResource(r)
		if kind == backup.Kind {
			v, err := a.backupView(ctx, r, false)
			if err != nil {
				return err
			}
			obj = v.Object()
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		var data any
		if err := json.Unmarshal(b, &data); err != nil {
			return err
		}
		res, err := jp.FindResults(data)
		if err != nil {
			return usageError{fmt.Errorf("--sort-by %s: %v", termtext.Quote(expr), err)}
		}
		if len(res) > 0 && len(res[0]) > 0 && res[0][0].IsValid() && res[0][0].CanInterface() {
			keys[r] = res[0][0].Interface()
		}
	}
	slices.SortStableFunc(items, func(x, y *catalog.Resource) int { return compareSortKeys(keys[x], keys[y]) })
	return nil
}

// compareSortKeys orders two values of --sort-by: missing first, then
// numbers by value, RFC 3339 times as times, and anything else by its
// JSON text.
func compareSortKeys(x, y any) int {
	switch {
	case x == nil || y == nil:
		return cmp.Compare(boolInt(x != nil), boolInt(y != nil))
	}
	if fx, ok := x.(float64); ok {
		if fy, ok := y.(float64); ok {
			return cmp.Compare(fx, fy)
		}
	}
	if sx, ok := x.(string); ok {
		if sy, ok := y.(string); ok {
			tx, errx := time.Parse(time.RFC3339Nano, sx)
			ty, erry := time.Parse(time.RFC3339Nano, sy)
			if errx == nil && erry == nil {
				return tx.Compare(ty)
			}
			return strings.Compare(sx, sy)
		}
	}
	bx, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return bytes.Compare(bx, by)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// withNamespaceHint adds to the not-found error of a cluster-scoped key
// (no -n) the namespaces where a resource of that kind and name exists:
// `Database "orders" not found; it exists in namespace shop: use -n shop`.
// Other errors pass.
func withNamespaceHint(ctx context.Context, st catalog.Resources, err error) error {
	var nf *backup.NotFoundError
	if !errors.As(err, &nf) || nf.Key.Namespace != "" {
		return err
	}
	var nss []string
	opts := catalog.ListOptions{Kind: nf.Key.Kind}
	for {
		page, lerr := st.List(ctx, opts)
		if lerr != nil {
			return err // the hint is a courtesy: the error stands without it
		}
		for _, r := range page.Items {
			if r.Name == nf.Key.Name && r.Namespace != "" {
				nss = append(nss, r.Namespace)
			}
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	switch {
	case len(nss) == 0:
		return err
	case len(nss) == 1:
		nf.Hint = fmt.Sprintf("it exists in namespace %s: use -n %s", termtext.Quote(nss[0]), termtext.Quote(nss[0]))
	default:
		slices.Sort(nss)
		shown := nss
		more := ""
		if len(shown) > 5 {
			shown, more = shown[:5], fmt.Sprintf(" and %d more", len(nss)-5)
		}
		nf.Hint = fmt.Sprintf("it exists in namespaces %s%s: use -n NAMESPACE", strings.Join(quoteAll(shown), ", "), more)
	}
	return nf
}
