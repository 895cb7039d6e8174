package plugin_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

func TestResourceSelectorMatches(t *testing.T) {
	pod := func(ns string) plugin.Item {
		return plugin.Item{Version: "v1", Resource: "pods", Namespace: ns, Name: "p"}
	}
	deploy := plugin.Item{Group: "apps", Version: "v1", Resource: "deployments", Namespace: "prod", Name: "d"}
	snap := plugin.Item{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots", Namespace: "prod", Name: "s"}
	snapContent := plugin.Item{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents", Name: "c"} // cluster-scoped
	pv := plugin.Item{Version: "v1", Resource: "persistentvolumes", Name: "pv"}                                                // cluster-scoped
	fooPods := plugin.Item{Group: "foo.example.com", Version: "v1", Resource: "pods", Namespace: "prod", Name: "fp"}

	type match struct {
		item   plugin.Item
		labels map[string]string
		want   bool
	}
	for _, tc := range []struct {
		name    string
		sel     plugin.ResourceSelector
		matches []match
	}{
		{"zero selector matches everything", plugin.ResourceSelector{}, []match{
			{pod("prod"), nil, true}, {deploy, nil, true}, {pv, nil, true}, {snapContent, map[string]string{"a": "b"}, true},
		}},
		{"included namespaces", plugin.ResourceSelector{IncludedNamespaces: []string{"prod", "staging"}}, []match{
			{pod("prod"), nil, true}, {pod("staging"), nil, true}, {pod("dev"), nil, false},
			{pv, nil, false}, // cluster-scoped: the filter does not allow every namespace
		}},
		{"excluded namespaces", plugin.ResourceSelector{ExcludedNamespaces: []string{"kube-system"}}, []match{
			{pod("prod"), nil, true}, {pod("kube-system"), nil, false},
			{pv, nil, false}, // any exclusion means not every namespace
		}},
		{"star namespace allows all, cluster-scoped too", plugin.ResourceSelector{IncludedNamespaces: []string{"*"}}, []match{
			{pod("anything"), nil, true}, {pv, nil, true},
		}},
		{"star plus a name still allows all", plugin.ResourceSelector{IncludedNamespaces: []string{"prod", "*"}}, []match{
			{pod("dev"), nil, true}, {pv, nil, true},
		}},
		{"star included, some excluded", plugin.ResourceSelector{IncludedNamespaces: []string{"*"}, ExcludedNamespaces: []string{"dev"}}, []match{
			{pod("prod"), nil, true}, {pod("dev"), nil, false}, {pv, nil, false},
		}},
		{"included and excluded namespace: exclusion wins", plugin.ResourceSelector{IncludedNamespaces: []string{"prod"}, ExcludedNamespaces: []string{"prod"}}, []match{
			{pod("prod"), nil, false},
		}},
		{"group-qualified resource", plugin.ResourceSelector{IncludedResources: []string{"deployments.apps"}}, []match{
			{deploy, nil, true}, {pod("prod"), nil, false},
			{plugin.Item{Group: "extensions", Resource: "deployments", Namespace: "prod"}, nil, false},
		}},
		{"resource patterns are case-insensitive", plugin.ResourceSelector{IncludedResources: []string{" Deployments.Apps "}}, []match{
			{deploy, nil, true},
		}},
		{"bare resource name matches every group", plugin.ResourceSelector{IncludedResources: []string{"pods"}}, []match{
			{pod("prod"), nil, true}, {fooPods, nil, true}, {deploy, nil, false},
		}},
		{"core resource qualified with its plural alone", plugin.ResourceSelector{IncludedResources: []string{"persistentvolumes"}}, []match{
			{pv, nil, true}, {pod("prod"), nil, false},
		}},
		{"glob over a group", plugin.ResourceSelector{IncludedResources: []string{"*.snapshot.storage.k8s.io"}}, []match{
			{snap, nil, true}, {snapContent, nil, true}, {deploy, nil, false}, {pod("prod"), nil, false},
		}},
		{"glob inside a resource name", plugin.ResourceSelector{IncludedResources: []string{"volumesnapshot*.snapshot.storage.k8s.io"}}, []match{
			{snap, nil, true}, {snapContent, nil, true},
		}},
		{"star resource", plugin.ResourceSelector{IncludedResources: []string{"*"}}, []match{
			{pod("prod"), nil, true}, {deploy, nil, true}, {snap, nil, true},
		}},
		{"excluded resources", plugin.ResourceSelector{ExcludedResources: []string{"pods", "*.apps"}}, []match{
			{pod("prod"), nil, false}, {fooPods, nil, false}, {deploy, nil, false}, {snap, nil, true},
		}},
		{"included and excluded resource: exclusion wins", plugin.ResourceSelector{IncludedResources: []string{"*.snapshot.storage.k8s.io"}, ExcludedResources: []string{"volumesnapshotcontents.snapshot.storage.k8s.io"}}, []match{
			{snap, nil, true}, {snapContent, nil, false},
		}},
		{"label equals", plugin.ResourceSelector{LabelSelector: "app=db"}, []match{
			{pod("prod"), map[string]string{"app": "db"}, true},
			{pod("prod"), map[string]string{"app": "web"}, false},
			{pod("prod"), nil, false},
		}},
		{"label double equals", plugin.ResourceSelector{LabelSelector: "app==db"}, []match{
			{pod("prod"), map[string]string{"app": "db"}, true},
			{pod("prod"), map[string]string{"app": "web"}, false},
		}},
		{"label not equals", plugin.ResourceSelector{LabelSelector: "app!=db"}, []match{
			{pod("prod"), map[string]string{"app": "web"}, true},
			{pod("prod"), nil, true}, // absent is not equal
			{pod("prod"), map[string]string{"app": "db"}, false},
		}},
		{"label in", plugin.ResourceSelector{LabelSelector: "tier in (a, b)"}, []match{
			{pod("prod"), map[string]string{"tier": "a"}, true},
			{pod("prod"), map[string]string{"tier": "b"}, true},
			{pod("prod"), map[string]string{"tier": "c"}, false},
			{pod("prod"), nil, false},
		}},
		{"label notin", plugin.ResourceSelector{LabelSelector: "tier notin (a,b)"}, []match{
			{pod("prod"), map[string]string{"tier": "c"}, true},
			{pod("prod"), nil, true},
			{pod("prod"), map[string]string{"tier": "a"}, false},
		}},
		{"label exists", plugin.ResourceSelector{LabelSelector: "legacy"}, []match{
			{pod("prod"), map[string]string{"legacy": ""}, true},
			{pod("prod"), map[string]string{"other": "x"}, false},
		}},
		{"label does not exist", plugin.ResourceSelector{LabelSelector: "!legacy"}, []match{
			{pod("prod"), nil, true},
			{pod("prod"), map[string]string{"legacy": "true"}, false},
		}},
		{"label conjunction", plugin.ResourceSelector{LabelSelector: "app=db,tier in (a,b),!legacy"}, []match{
			{pod("prod"), map[string]string{"app": "db", "tier": "a"}, true},
			{pod("prod"), map[string]string{"app": "db", "tier": "a", "legacy": "1"}, false},
			{pod("prod"), map[string]string{"app": "db"}, false},
		}},
		{"all filters together", plugin.ResourceSelector{
			IncludedNamespaces: []string{"prod"},
			IncludedResources:  []string{"*.snapshot.storage.k8s.io"},
			LabelSelector:      "app=db",
		}, []match{
			{snap, map[string]string{"app": "db"}, true},
			{snap, map[string]string{"app": "web"}, false},
			{snapContent, map[string]string{"app": "db"}, false}, // cluster-scoped
			{deploy, map[string]string{"app": "db"}, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.sel.Compile()
			require.NoError(t, err)
			for _, mt := range tc.matches {
				require.Equal(t, mt.want, m.Matches(mt.item, mt.labels), "item %s in %q, labels %v", mt.item.GroupResource(), mt.item.Namespace, mt.labels)
			}
		})
	}
}

func TestResourceSelectorCompileRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  plugin.ResourceSelector
	}{
		{"star in excluded namespaces", plugin.ResourceSelector{ExcludedNamespaces: []string{"*"}}},
		{"empty included resource", plugin.ResourceSelector{IncludedResources: []string{" "}}},
		{"empty excluded resource", plugin.ResourceSelector{ExcludedResources: []string{""}}},
		{"malformed glob", plugin.ResourceSelector{IncludedResources: []string{"[pods"}}},
		{"malformed excluded glob", plugin.ResourceSelector{ExcludedResources: []string{"pods\\"}}},
		{"unbalanced label set", plugin.ResourceSelector{LabelSelector: "tier in (a,b"}},
		{"invalid label key", plugin.ResourceSelector{LabelSelector: "-bad-=x"}},
		{"dangling operator", plugin.ResourceSelector{LabelSelector: "app=" + "=" + "="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.sel.Compile()
			require.Error(t, err)
		})
	}
}

func TestResourceSelectorIsZeroAndString(t *testing.T) {
	require.True(t, plugin.ResourceSelector{}.IsZero())
	require.True(t, plugin.ResourceSelector{LabelSelector: "  "}.IsZero())
	require.False(t, plugin.ResourceSelector{IncludedNamespaces: []string{"*"}}.IsZero())
	require.Equal(t, "all items", plugin.ResourceSelector{}.String())
	require.Equal(t, "ns=prod !res=pods labels=app=db",
		plugin.ResourceSelector{IncludedNamespaces: []string{"prod"}, ExcludedResources: []string{"pods"}, LabelSelector: "app=db"}.String())
}

func TestMatcherMatchesResourceAndLabels(t *testing.T) {
	m, err := plugin.ResourceSelector{IncludedResources: []string{"pods"}, LabelSelector: "app=db"}.Compile()
	require.NoError(t, err)
	require.True(t, m.HasLabelSelector())
	require.True(t, m.MatchesResource("pods", "pods", "ns"))
	require.False(t, m.MatchesResource("deployments.apps", "deployments", "ns"))
	require.True(t, m.MatchesLabels(map[string]string{"app": "db"}))
	require.False(t, m.MatchesLabels(nil))

	zero, err := plugin.ResourceSelector{}.Compile()
	require.NoError(t, err)
	require.False(t, zero.HasLabelSelector())
	require.True(t, zero.MatchesLabels(nil))
}

// TestSecretsOnlyWhenNamed: Secrets reach a plugin only when its selector
// names "secrets" literally; no wildcard, glob or zero selector does.
func TestSecretsOnlyWhenNamed(t *testing.T) {
	secret := plugin.Item{Version: "v1", Resource: "secrets", Kind: "Secret", Namespace: "prod", Name: "db"}
	otherGroup := plugin.Item{Group: "example.com", Version: "v1", Resource: "secrets", Namespace: "prod", Name: "x"}
	for _, tc := range []struct {
		sel  plugin.ResourceSelector
		want bool
	}{
		{plugin.ResourceSelector{}, false},
		{plugin.ResourceSelector{IncludedResources: []string{"*"}}, false},
		{plugin.ResourceSelector{IncludedResources: []string{"secret*"}}, false},
		{plugin.ResourceSelector{IncludedResources: []string{"s*", "pods"}}, false},
		{plugin.ResourceSelector{ExcludedResources: []string{"pods"}}, false},
		{plugin.ResourceSelector{IncludedResources: []string{"secrets"}}, true},
		{plugin.ResourceSelector{IncludedResources: []string{"pods", " Secrets "}}, true},
		{plugin.ResourceSelector{IncludedResources: []string{"*", "secrets"}}, true},
		{plugin.ResourceSelector{IncludedResources: []string{"secrets"}, ExcludedResources: []string{"secrets"}}, false},
	} {
		m, err := tc.sel.Compile()
		require.NoError(t, err)
		require.Equal(t, tc.want, m.Matches(secret, nil), "selector %+v", tc.sel)
	}
	// Only the core group's Secrets are held back.
	m, err := plugin.ResourceSelector{}.Compile()
	require.NoError(t, err)
	require.True(t, m.Matches(otherGroup, nil))
}

// TestNativeVolumeSnapshotsOnlyWhenNamed: native volume snapshot items
// reach a plugin only when its selector names their resource literally.
func TestNativeVolumeSnapshotsOnlyWhenNamed(t *testing.T) {
	snap := plugin.Item{
		Group: plugin.NativeVolumeSnapshotGroup, Version: plugin.NativeVolumeSnapshotVersion,
		Resource: plugin.NativeVolumeSnapshotResource, Kind: plugin.NativeVolumeSnapshotKind, Name: "pv-data",
	}
	for _, tc := range []struct {
		sel  plugin.ResourceSelector
		want bool
	}{
		{plugin.ResourceSelector{}, false},
		{plugin.ResourceSelector{IncludedResources: []string{"*"}}, false},
		{plugin.ResourceSelector{IncludedResources: []string{"*.lethe.io"}}, false},
		{plugin.ResourceSelector{IncludedResources: []string{"volumesnapshots"}}, false},
		{plugin.ResourceSelector{IncludedResources: []string{"nativevolumesnapshots"}}, true},
		{plugin.ResourceSelector{IncludedResources: []string{"NativeVolumeSnapshots.lethe.io"}}, true},
		{plugin.ResourceSelector{IncludedResources: []string{"nativevolumesnapshots.lethe.io"}, IncludedNamespaces: []string{"shop"}}, false},
		{plugin.ResourceSelector{IncludedResources: []string{"nativevolumesnapshots"}, ExcludedResources: []string{"*"}}, false},
	} {
		m, err := tc.sel.Compile()
		require.NoError(t, err)
		require.Equal(t, tc.want, m.Matches(snap, nil), "selector %+v", tc.sel)
	}
	require.True(t, snap.IsNativeVolumeSnapshot())
}
