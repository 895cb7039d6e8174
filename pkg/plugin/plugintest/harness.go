package plugintest

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/lethehq/lethe/pkg/plugin"
)

// ItemResult is what happened to one item given to Harness.Run or Conn.Run.
type ItemResult struct {
	// Item is the item as given.
	Item plugin.Item
	// Selected reports whether the action's selector admitted the item.
	// Unselected items are not executed, and their Result is zero.
	Selected bool
	// Result is the classified outcome of Execute.
	Result plugin.Result
	// Err is the error Execute returned, unclassified: nil when it returned
	// nil or for unselected items. Over gRPC (Conn.Run) only the Result
	// crosses the wire, and Err is nil.
	Err error
}

// Harness runs a DeleteItemAction in-process, the way the host and the SDK
// would run it out of process: AppliesTo once, the selector compiled and
// matched against each item (labels from metadata.labels), and Execute
// called concurrently up to MaxConcurrency. A panic in Execute fails the
// item, as it does in a served plugin.
//
// The zero Harness is not usable: set Action.
type Harness struct {
	// Action is the action under test.
	Action plugin.DeleteItemAction
	// Backup is passed to every Execute call.
	Backup plugin.Backup
	// MaxConcurrency caps concurrent Execute calls, as Plugin.MaxConcurrency
	// does (0 means plugin.DefaultMaxConcurrency).
	MaxConcurrency int
}

// Run runs action over items with a default Harness. See Harness.Run.
func Run(t testing.TB, action plugin.DeleteItemAction, items ...plugin.Item) []ItemResult {
	t.Helper()
	return (&Harness{Action: action}).Run(t, items...)
}

// Run calls AppliesTo, compiles the selector, and executes every selected
// item, concurrently. It returns one ItemResult per item, in the order
// given. It fails the test when AppliesTo fails or returns an invalid
// selector. Execute's ctx is t.Context(), cancelled when the test ends.
func (h *Harness) Run(t testing.TB, items ...plugin.Item) []ItemResult {
	t.Helper()
	if h.Action == nil {
		t.Fatal("plugintest: Harness.Action is nil")
	}
	if h.MaxConcurrency < 0 {
		t.Fatalf("plugintest: Harness.MaxConcurrency %d is negative", h.MaxConcurrency)
	}
	ctx := t.Context()
	_, m := h.Selector(t)
	out := make([]ItemResult, len(items))
	sem := make(chan struct{}, cmp.Or(h.MaxConcurrency, plugin.DefaultMaxConcurrency))
	var wg sync.WaitGroup
	for i, it := range items {
		out[i].Item = it
		if !m.Matches(it, Labels(it)) {
			continue
		}
		out[i].Selected = true
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i].Result, out[i].Err = h.Execute(ctx, it)
		})
	}
	wg.Wait()
	return out
}

// Selector calls AppliesTo and returns the selector and its compiled
// Matcher, failing the test when either step fails.
func (h *Harness) Selector(t testing.TB) (plugin.ResourceSelector, *plugin.Matcher) {
	t.Helper()
	sel, err := h.Action.AppliesTo(t.Context())
	if err != nil {
		t.Fatalf("plugintest: AppliesTo: %v", err)
	}
	m, err := sel.Compile()
	if err != nil {
		t.Fatalf("plugintest: AppliesTo returned an invalid selector: %v", err)
	}
	return sel, m
}

// Execute calls the action's Execute on one item, whether or not the
// selector admits it, and classifies the result. A panic becomes a failed
// Result and an error, as in a served plugin. Use it to drive one item with
// a context of your own, for example a cancelled one.
func (h *Harness) Execute(ctx context.Context, it plugin.Item) (res plugin.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("plugin panicked: %v", v)
			res = plugin.Result{Outcome: plugin.OutcomeFailed, Message: err.Error()}
		}
	}()
	in := &plugin.DeleteItemActionInput{Item: it, Backup: h.Backup}
	in.Item.Object = append([]byte(nil), it.Object...) // the action owns it during Execute
	err = h.Action.Execute(ctx, in)
	res = plugin.Classify(err)
	res.Message = oneLine(res.Message)
	return res, err
}

// oneLine flattens a message to one line, as the SDK does on the wire.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}
