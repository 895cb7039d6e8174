package velero_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/velero"
)

// TestResolveResourceAsVelerosDiscoveryDoes pins issue 24 point 6: a
// selector's resource names resolve as Velero resolves them through
// discovery (plural, singular, short names, with or without the group),
// from the generated table of built-in resources; anything else is kept.
func TestResolveResourceAsVelerosDiscoveryDoes(t *testing.T) {
	for in, want := range map[string]string{
		"cm": "configmaps", "configmap": "configmaps", "configmaps": "configmaps", "CM": "configmaps",
		"svc": "services", "pvc": "persistentvolumeclaims", "pv": "persistentvolumes", "ns": "namespaces",
		"po": "pods", "pod": "pods", "secret": "secrets", "sa": "serviceaccounts",
		"deploy": "deployments.apps", "deploy.apps": "deployments.apps", "deployment": "deployments.apps",
		"deployments.apps": "deployments.apps", "sts": "statefulsets.apps", "ds": "daemonsets.apps",
		"cj": "cronjobs.batch", "job": "jobs.batch", "ing": "ingresses.networking.k8s.io",
		"netpol": "networkpolicies.networking.k8s.io", "pdb": "poddisruptionbudgets.policy",
		"crd": "customresourcedefinitions.apiextensions.k8s.io", "sc": "storageclasses.storage.k8s.io",
		// A plural without a group stays: it matches in every group.
		"events": "events", "deployments": "deployments",
		// The core group first when a singular is in several groups.
		"event": "events", "ev": "events",
	} {
		got, ok := velero.ResolveResource(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"widgets", "widgets.example.io", "widget", "*", "*.apps", "deploy.batch", "confgmaps"} {
		got, ok := velero.ResolveResource(in)
		require.False(t, ok, in)
		require.Equal(t, in, got, in)
	}
}
