package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
	"github.com/lethehq/lethe/pkg/plugin/plugintest"
)

func TestNoopAcceptsEverything(t *testing.T) {
	items := []plugin.Item{
		plugintest.ItemFromJSON(t, "pods", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"a"}}`),
		plugintest.ItemFromJSON(t, "persistentvolumes", `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv"}}`),
		plugintest.ItemFromJSON(t, "deployments.apps", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"b","labels":{"x":"y"}}}`),
	}
	for _, r := range plugintest.Run(t, action{}, items...) {
		require.True(t, r.Selected, r.Item.Name)
		require.Equal(t, plugin.OutcomeDone, r.Result.Outcome, r.Item.Name)
	}
}

func TestNoopOverGRPC(t *testing.T) {
	c := plugintest.Serve(t, &plugin.Plugin{Name: "noop", Version: Version, Action: action{}, MaxConcurrency: 1024})
	c.BatchSize = 7
	items := make([]plugin.Item, 100)
	for i := range items {
		items[i] = plugin.Item{Resource: "configmaps", Namespace: "ns", Name: "cm"}
	}
	for _, r := range c.Run(t, "lethe.io/noop", items...) {
		require.Equal(t, plugin.OutcomeDone, r.Result.Outcome)
	}
}

func TestNoopConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binary")
	}
	plugintest.Conformance(t, plugintest.Build(t, "."), &plugintest.ConformanceOptions{
		Plugins: []string{"lethe.io/noop"},
		CheckResult: func(t testing.TB, _ string, it plugin.Item, r plugin.Result) {
			require.Equal(t, plugin.OutcomeDone, r.Outcome, it.Name)
		},
	})
}
