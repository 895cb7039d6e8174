package plugintest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

// retainer checks every item's object while Execute runs (before and
// after a pause for some), and keeps every input it is given.
type retainer struct {
	mu   sync.Mutex
	kept []*plugin.DeleteItemActionInput
	bad  []string
}

func reuseObject(name string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"ns-%s"},"data":{"pad":%q}}`,
		name, name[len(name)-1:], strings.Repeat(name, 1000/len(name)))
}

func (r *retainer) AppliesTo(context.Context) (plugin.ResourceSelector, error) {
	return plugin.ResourceSelector{}, nil
}

func (r *retainer) Execute(_ context.Context, in *plugin.DeleteItemActionInput) error {
	check := func(when string) {
		if want := reuseObject(in.Item.Name); !bytes.Equal(in.Item.Object, want) {
			r.mu.Lock()
			if len(r.bad) < 10 {
				r.bad = append(r.bad, in.Item.Name+" "+when)
			}
			r.mu.Unlock()
		}
	}
	check("at the start")
	if strings.HasSuffix(in.Item.Name, "7") {
		time.Sleep(5 * time.Millisecond) // later batches arrive meanwhile
		check("after a pause")
	}
	r.mu.Lock()
	r.kept = append(r.kept, in)
	r.mu.Unlock()
	return nil
}

// TestReceivedBytesAreReusedSafely runs thousands of items through the
// SDK's real server, whose receive buffers are reused once a batch's items
// are finished. An item's object must not change while Execute runs, even
// when it pauses while later batches arrive; the strings of an input the
// action keeps must not change afterwards; and a kept input's Object is
// nil once released, never another item's bytes.
func TestReceivedBytesAreReusedSafely(t *testing.T) {
	const n = 4000
	r := &retainer{}
	c := Serve(t, &plugin.Plugin{Name: "example.com/retainer", Version: "v0.1.0", Action: r, MaxConcurrency: 8})
	c.BatchSize = 64
	items := make([]plugin.Item, n)
	for i := range items {
		name := fmt.Sprintf("cm-%05d", i)
		items[i] = plugin.Item{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "ns-" + name[len(name)-1:], Name: name, Object: reuseObject(name)}
	}
	res := c.Run(t, "example.com/retainer", items...)
	for _, rr := range res {
		require.Equal(t, plugin.OutcomeDone, rr.Result.Outcome, rr.Item.Name)
	}
	require.Empty(t, r.bad, "objects changed while their Execute ran")
	require.Len(t, r.kept, n)
	seen := map[string]bool{}
	for _, in := range r.kept {
		name := in.Item.Name
		require.Regexp(t, `^cm-\d{5}$`, name)
		require.False(t, seen[name], "name %s seen twice: a kept name changed", name)
		seen[name] = true
		require.Equal(t, plugin.Item{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "ns-" + name[len(name)-1:], Name: name}, in.Item)
	}
}
