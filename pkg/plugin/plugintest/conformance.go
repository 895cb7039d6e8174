package plugintest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/lethehq/lethe/pkg/plugin"
	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// CallTimeoutDefault bounds each call of the conformance check.
const CallTimeoutDefault = time.Minute

// ConformanceOptions tune Conformance. The zero value is usable.
type ConformanceOptions struct {
	// Env is what an operator would configure for the plugin ("KEY=value",
	// lethe --plugin-env). Like the host, Conformance passes the binary
	// nothing else of the test's environment but plugin.PassedEnv.
	Env []string
	// Plugins, when set, are the full names ListPlugins must list, in any
	// order.
	Plugins []string
	// Items are sample items. Each plugin is sent those its selector
	// admits; a plugin that admits none is sent an item generated from its
	// selector.
	Items []plugin.Item
	// Backup is sent in the start message of every Execute stream.
	Backup plugin.Backup
	// CheckResult, when set, is called with each sample item's result (not
	// the cancelled one's), to check outcomes the plugin promises.
	CheckResult func(t testing.TB, name string, it plugin.Item, r plugin.Result)
	// GoPluginAutoMTLS starts the binary with go-plugin's AutoMTLS instead
	// of Lethe's automatic mTLS, as the host does when its
	// Config.GoPluginAutoMTLS is set (for plugins that do not use the SDK's
	// Serve and do not read plugin.MTLSFDEnv).
	GoPluginAutoMTLS bool
	// CallTimeout bounds each call (default CallTimeoutDefault), so that a
	// hung plugin fails the check rather than hanging the test.
	CallTimeout time.Duration
}

// Conformance checks a built plugin binary against Lethe's plugin protocol,
// as subtests of t:
//
//   - handshake: the binary starts through go-plugin with plugin.Handshake,
//     gRPC and mTLS (see Start), and negotiates a protocol version the SDK
//     knows;
//   - ListPlugins: it serves at least one plugin, every name is valid and
//     full ("<dns-subdomain>/<name>"), no name repeats, every kind is
//     DeleteItemAction (and the names are opts.Plugins, when set);
//   - <name>/AppliesTo: the selector compiles;
//   - <name>/Execute: sample items, sent in two batches on one stream, each
//     get exactly one result with a known outcome and a one-line message;
//   - <name>/Cancel: an item cancelled with CancelItems right after it is
//     sent still gets exactly one result, and the stream ends cleanly;
//   - UnknownPlugin: AppliesTo and Execute for a plugin the binary
//     does not serve are refused;
//   - Shutdown: after the host closes the connection, the process exits
//     by itself and leaves nothing in its process group.
//
// Sample items are opts.Items, or generated from each plugin's selector. The
// plugin may answer them with any outcome; use opts.CheckResult to demand
// more.
func Conformance(t *testing.T, binary string, opts *ConformanceOptions) {
	t.Helper()
	if opts == nil {
		opts = &ConformanceOptions{}
	}
	timeout := cmp.Or(opts.CallTimeout, CallTimeoutDefault)
	call := func(t *testing.T) (context.Context, context.CancelFunc) {
		return context.WithTimeout(t.Context(), timeout)
	}

	var p *Process
	parent := t
	if !t.Run("handshake", func(t *testing.T) {
		var err error
		p, err = start(parent, binary, opts.Env, opts.GoPluginAutoMTLS) // lives until the parent test ends
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := plugin.VersionedPlugins()[p.ProtocolVersion]; !ok {
			t.Fatalf("negotiated protocol version %d, which the SDK does not speak", p.ProtocolVersion)
		}
	}) {
		return
	}

	var names []string
	if !t.Run("ListPlugins", func(t *testing.T) {
		ctx, cancel := call(t)
		defer cancel()
		list, err := p.ListPlugins(ctx)
		if err != nil {
			t.Fatalf("ListPlugins: %v", err)
		}
		names, err = checkList(list, opts.Plugins)
		if err != nil {
			t.Fatal(err)
		}
	}) {
		return
	}

	for _, name := range names {
		var m *plugin.Matcher
		var sel plugin.ResourceSelector
		if !t.Run(name+"/AppliesTo", func(t *testing.T) {
			ctx, cancel := call(t)
			defer cancel()
			var err error
			sel, err = p.AppliesTo(ctx, name)
			if err != nil {
				t.Fatalf("AppliesTo: %v", err)
			}
			if m, err = sel.Compile(); err != nil {
				t.Fatalf("AppliesTo returned an invalid selector %q: %v", sel, err)
			}
		}) {
			continue
		}
		samples := selectItems(m, opts.Items)
		if len(samples) == 0 {
			it, err := SampleItem(sel)
			if err != nil {
				t.Errorf("plugin %q: no sample item matches its selector %q, and none can be generated (%v): pass ConformanceOptions.Items", name, sel, err)
				continue
			}
			samples = []plugin.Item{it}
		}
		t.Run(name+"/Execute", func(t *testing.T) {
			ctx, cancel := call(t)
			defer cancel()
			results, err := checkExecute(ctx, p.Conn, name, opts.Backup, samples)
			if err != nil {
				t.Fatal(err)
			}
			if opts.CheckResult != nil {
				for i, it := range samples {
					opts.CheckResult(t, name, it, results[i])
				}
			}
		})
		t.Run(name+"/Cancel", func(t *testing.T) {
			ctx, cancel := call(t)
			defer cancel()
			if err := checkCancel(ctx, p.Conn, name, opts.Backup, samples[0]); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("UnknownPlugin", func(t *testing.T) {
		ctx, cancel := call(t)
		defer cancel()
		if err := checkUnknown(ctx, p.Conn, names); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Shutdown", func(t *testing.T) {
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func checkList(list []*pluginv1.PluginDescriptor, want []string) ([]string, error) {
	if len(list) == 0 {
		return nil, errors.New("ListPlugins lists no plugin")
	}
	var errs []error
	var names []string
	for _, d := range list {
		full, err := plugin.NormalizeName(d.GetName())
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("ListPlugins: %w", err))
			continue
		case full != d.GetName():
			errs = append(errs, fmt.Errorf("ListPlugins: name %q is not in full form (want %q)", d.GetName(), full))
		case slices.Contains(names, full):
			errs = append(errs, fmt.Errorf("ListPlugins lists %q twice", full))
			continue
		}
		if d.GetKind() != pluginv1.PluginKind_PLUGIN_KIND_DELETE_ITEM_ACTION {
			errs = append(errs, fmt.Errorf("ListPlugins: plugin %q has kind %s, want %s", full, d.GetKind(), pluginv1.PluginKind_PLUGIN_KIND_DELETE_ITEM_ACTION))
		}
		names = append(names, full)
	}
	if want != nil {
		var norm []string
		for _, w := range want {
			n, err := plugin.NormalizeName(w)
			if err != nil {
				return nil, fmt.Errorf("ConformanceOptions.Plugins: %w", err)
			}
			norm = append(norm, n)
		}
		slices.Sort(norm)
		got := slices.Sorted(slices.Values(names))
		if !slices.Equal(got, norm) {
			errs = append(errs, fmt.Errorf("ListPlugins lists %q, want %q", got, norm))
		}
	}
	return names, errors.Join(errs...)
}

func selectItems(m *plugin.Matcher, items []plugin.Item) []plugin.Item {
	var out []plugin.Item
	for _, it := range items {
		if m.Matches(it, Labels(it)) {
			out = append(out, it)
		}
	}
	return out
}

// checkExecute sends the samples in two batches on one stream, and returns
// their results in order.
func checkExecute(ctx context.Context, c *Conn, name string, b plugin.Backup, samples []plugin.Item) ([]plugin.Result, error) {
	s, err := c.OpenStream(ctx, name, b)
	if err != nil {
		return nil, fmt.Errorf("Execute: %w", err)
	}
	half := (len(samples) + 1) / 2
	var ids []uint64
	for _, part := range [][]plugin.Item{samples[:half], samples[half:]} {
		if len(part) == 0 {
			continue
		}
		got, err := s.Send(part...)
		if err != nil {
			return nil, fmt.Errorf("Execute: send a batch: %w", err)
		}
		ids = append(ids, got...)
	}
	results, err := s.Wait()
	if err != nil {
		return nil, fmt.Errorf("Execute: %w", err)
	}
	out := make([]plugin.Result, len(ids))
	for i, id := range ids {
		out[i] = results[id]
	}
	return out, nil
}

// checkCancel sends one item, cancels it at once, and wants its one result.
func checkCancel(ctx context.Context, c *Conn, name string, b plugin.Backup, it plugin.Item) error {
	s, err := c.OpenStream(ctx, name, b)
	if err != nil {
		return fmt.Errorf("Execute: %w", err)
	}
	ids, err := s.Send(it)
	if err != nil {
		return fmt.Errorf("Execute: send: %w", err)
	}
	if err := s.Cancel("plugintest: cancelled by the conformance check", ids...); err != nil {
		return fmt.Errorf("Execute: send CancelItems: %w", err)
	}
	// A cancel for an id never sent must be ignored.
	if err := s.Cancel("plugintest: unknown id", ids[0]+1000); err != nil {
		return fmt.Errorf("Execute: send CancelItems: %w", err)
	}
	results, err := s.Wait()
	if err != nil {
		return fmt.Errorf("Execute with a cancelled item: %w", err)
	}
	if _, ok := results[ids[0]]; !ok {
		return fmt.Errorf("the cancelled item got no result")
	}
	return nil
}

// checkUnknown wants AppliesTo and Execute refused for a plugin the binary
// does not serve.
func checkUnknown(ctx context.Context, c *Conn, served []string) error {
	name := "plugintest.invalid/not-served"
	for slices.Contains(served, name) {
		name += "-x"
	}
	if _, err := c.AppliesTo(ctx, name); err == nil {
		return fmt.Errorf("AppliesTo(%q) succeeded for a plugin the binary does not serve", name)
	}
	s, err := c.OpenStream(ctx, name, plugin.Backup{})
	if err != nil {
		return nil // refused at once
	}
	if _, err := s.Wait(); err == nil {
		return fmt.Errorf("Execute(%q) succeeded for a plugin the binary does not serve", name)
	}
	return nil
}

// SampleItem generates an item that the selector admits: in an included
// namespace (or "default"), of the first included resource with globs
// filled in (or a core-group configmap), with labels that satisfy the
// label selector. It fails when it cannot find one, for example when every
// pattern is excluded.
func SampleItem(sel plugin.ResourceSelector) (plugin.Item, error) {
	m, err := sel.Compile()
	if err != nil {
		return plugin.Item{}, err
	}
	lbls, err := sampleLabels(sel.LabelSelector)
	if err != nil {
		return plugin.Item{}, err
	}
	var namespaces []string
	for _, ns := range sel.IncludedNamespaces {
		if ns != "*" {
			namespaces = append(namespaces, ns)
		}
	}
	namespaces = append(namespaces, "default", "plugintest", "")
	resources := slices.Clone(sel.IncludedResources)
	resources = append(resources, "configmaps")
	for _, pat := range resources {
		gr := fillGlob(strings.ToLower(strings.TrimSpace(pat)))
		res, group, _ := strings.Cut(gr, ".")
		for _, ns := range namespaces {
			it := plugin.Item{Group: group, Version: "v1", Resource: res, Kind: "Sample", Namespace: ns, Name: "plugintest-sample"}
			if !m.Matches(it, lbls) {
				continue
			}
			apiVersion := "v1"
			if group != "" {
				apiVersion = group + "/v1"
			}
			meta := map[string]any{"name": it.Name}
			if ns != "" {
				meta["namespace"] = ns
			}
			if len(lbls) > 0 {
				meta["labels"] = lbls
			}
			it.Object, err = json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": it.Kind, "metadata": meta})
			if err != nil {
				return plugin.Item{}, err
			}
			return it, nil
		}
	}
	return plugin.Item{}, fmt.Errorf("no generated item matches selector %q", sel)
}

// fillGlob replaces glob metacharacters with letters.
func fillGlob(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*', '?':
			b.WriteByte('x')
		case '[':
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				return b.String()
			}
			class := p[i+1 : i+j]
			if len(class) > 0 && class[0] != '^' && class[0] != '!' {
				b.WriteByte(class[0])
			} else {
				b.WriteByte('x')
			}
			i += j
		case '\\':
			if i+1 < len(p) {
				i++
				b.WriteByte(p[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// sampleLabels returns labels that satisfy a label selector.
func sampleLabels(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, err
	}
	reqs, _ := sel.Requirements()
	out := map[string]string{}
	for _, r := range reqs {
		vals := r.ValuesUnsorted()
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			out[r.Key()] = vals[0]
		case selection.Exists:
			out[r.Key()] = "plugintest"
		case selection.GreaterThan:
			n, _ := strconv.ParseInt(vals[0], 10, 64)
			out[r.Key()] = strconv.FormatInt(n+1, 10)
		case selection.LessThan:
			n, _ := strconv.ParseInt(vals[0], 10, 64)
			out[r.Key()] = strconv.FormatInt(n-1, 10)
		default: // !=, notin, !key: leave the key out
		}
	}
	if !sel.Matches(labels.Set(out)) {
		return nil, fmt.Errorf("cannot generate labels for %q", s)
	}
	return out, nil
}
