package plugintest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

func sampleItems(t *testing.T) []plugin.Item {
	mk := func(name, ns string, labels map[string]any) plugin.Item {
		meta := map[string]any{"name": name, "namespace": ns}
		if labels != nil {
			meta["labels"] = labels
		}
		return ItemFromObject(t, "volumesnapshots", map[string]any{
			"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": meta,
		})
	}
	return []plugin.Item{
		mk("done", "prod", map[string]any{"app": "db"}),
		mk("blocked", "prod", map[string]any{"app": "db"}),
		mk("skipped", "prod", map[string]any{"app": "db"}),
		mk("failed", "prod", map[string]any{"app": "db"}),
		mk("panics", "prod", map[string]any{"app": "db"}),
		mk("other-ns", "dev", map[string]any{"app": "db"}),
		mk("no-label", "prod", nil),
		ItemFromJSON(t, "pods", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pod","namespace":"prod","labels":{"app":"db"}}}`),
	}
}

var sampleSelector = plugin.ResourceSelector{
	IncludedNamespaces: []string{"prod"},
	IncludedResources:  []string{"*.snapshot.storage.k8s.io"},
	LabelSelector:      "app=db",
}

// wantSample is what byName does to sampleItems under sampleSelector.
var wantSample = []struct {
	selected bool
	outcome  plugin.Outcome
	message  string
}{
	{true, plugin.OutcomeDone, ""},
	{true, plugin.OutcomeBlocked, "locked"},
	{true, plugin.OutcomeSkipped, "not mine"},
	{true, plugin.OutcomeFailed, "boom second line"},
	{true, plugin.OutcomeFailed, "plugin panicked: oh no"},
	{false, 0, ""},
	{false, 0, ""},
	{false, 0, ""},
}

func checkSample(t *testing.T, got []ItemResult, items []plugin.Item) {
	t.Helper()
	require.Len(t, got, len(wantSample))
	for i, w := range wantSample {
		require.Equal(t, items[i].Name, got[i].Item.Name, "results are in item order")
		require.Equal(t, w.selected, got[i].Selected, "item %s", items[i].Name)
		require.Equal(t, w.outcome, got[i].Result.Outcome, "item %s", items[i].Name)
		require.Equal(t, w.message, got[i].Result.Message, "item %s", items[i].Name)
	}
	require.Equal(t, time.Minute, got[1].Result.RetryAfter)
}

func TestHarnessRun(t *testing.T) {
	items := sampleItems(t)
	got := (&Harness{Action: &fakeAction{Selector: sampleSelector, ExecuteFunc: byName}}).Run(t, items...)
	checkSample(t, got, items)
	require.NoError(t, got[0].Err)
	require.ErrorContains(t, got[1].Err, "wrapped")
	require.Nil(t, got[5].Err)
}

func TestHarnessPassesBackup(t *testing.T) {
	b := plugin.Backup{Name: "nightly", UID: "u1"}
	var seen atomic.Value
	h := &Harness{Backup: b, Action: &fakeAction{ExecuteFunc: func(_ context.Context, in *plugin.DeleteItemActionInput) error {
		seen.Store(in.Backup.Name)
		return nil
	}}}
	h.Run(t, ItemFromJSON(t, "pods", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}`))
	require.Equal(t, "nightly", seen.Load())
}

func TestHarnessConcurrencyLimit(t *testing.T) {
	const limit = 3
	var mu sync.Mutex
	inFlight, peak := 0, 0
	full := make(chan struct{}) // closed once limit items run at once
	var once sync.Once
	h := &Harness{MaxConcurrency: limit, Action: &fakeAction{ExecuteFunc: func(context.Context, *plugin.DeleteItemActionInput) error {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		if inFlight == limit {
			once.Do(func() { close(full) })
		}
		mu.Unlock()
		<-full // the first items wait until the limit is reached: proves concurrency
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	}}}
	items := make([]plugin.Item, 10)
	for i := range items {
		items[i] = plugin.Item{Resource: "pods", Namespace: "a", Name: "p"}
	}
	for _, r := range h.Run(t, items...) {
		require.Equal(t, plugin.OutcomeDone, r.Result.Outcome)
	}
	require.Equal(t, limit, peak)
}

func TestHarnessFailsOnBadSelector(t *testing.T) {
	bad := &fakeAction{Selector: plugin.ResourceSelector{LabelSelector: "app in ("}}
	msg := fatalMessage(t, func(tb testing.TB) { Run(tb, bad, plugin.Item{Resource: "pods"}) })
	require.Contains(t, msg, "invalid selector")

	failing := &fakeAction{AppliesToErr: context.DeadlineExceeded}
	msg = fatalMessage(t, func(tb testing.TB) { Run(tb, failing) })
	require.Contains(t, msg, "AppliesTo")
}

func TestHarnessExecuteCancelled(t *testing.T) {
	h := &Harness{Action: &fakeAction{ExecuteFunc: waitForCancel}}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res, err := h.Execute(ctx, plugin.Item{Name: "slow"})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, plugin.OutcomeFailed, res.Outcome)
}

func TestItemFromObject(t *testing.T) {
	it := ItemFromJSON(t, "volumesnapshotcontents.snapshot.storage.k8s.io",
		`{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotContent","metadata":{"name":"c","labels":{"a":"b"}}}`)
	require.Equal(t, plugin.Item{
		Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents",
		Kind: "VolumeSnapshotContent", Name: "c", Object: it.Object,
	}, it)
	require.Equal(t, "volumesnapshotcontents.snapshot.storage.k8s.io", it.GroupResource())
	require.Equal(t, map[string]string{"a": "b"}, Labels(it))

	pod := ItemFromObject(t, "pods", map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "namespace": "ns"}})
	require.Equal(t, "", pod.Group)
	require.Equal(t, "v1", pod.Version)
	require.Equal(t, "ns", pod.Namespace)
	require.Nil(t, Labels(pod))

	msg := fatalMessage(t, func(tb testing.TB) {
		ItemFromJSON(tb, "deployments.apps", `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j"}}`)
	})
	require.Contains(t, msg, `group "apps"`)
	msg = fatalMessage(t, func(tb testing.TB) { ItemFromJSON(tb, "pods", `[1]`) })
	require.Contains(t, msg, "not a JSON object")
}

func TestSampleItem(t *testing.T) {
	for _, sel := range []plugin.ResourceSelector{
		{},
		sampleSelector,
		{IncludedNamespaces: []string{"*"}, ExcludedNamespaces: []string{"default"}, IncludedResources: []string{"deployments.apps"}},
		{IncludedResources: []string{"persistentvolumes"}, LabelSelector: "tier notin (a),!legacy,zone,size>3,n<2"},
		{IncludedResources: []string{"[ab]?.example.com"}, ExcludedResources: []string{"configmaps"}},
	} {
		it, err := SampleItem(sel)
		require.NoError(t, err, "selector %q", sel)
		m, err := sel.Compile()
		require.NoError(t, err)
		require.True(t, m.Matches(it, Labels(it)), "selector %q, item %+v", sel, it)
	}
	_, err := SampleItem(plugin.ResourceSelector{IncludedResources: []string{"pods"}, ExcludedResources: []string{"*"}})
	require.Error(t, err)
}
