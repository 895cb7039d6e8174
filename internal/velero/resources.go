package velero

import (
	"slices"
	"strings"
)

//go:generate go run -C ../../tools/kuberesources . -out ../../internal/velero/zz_generated_resources.go

// builtinResource is one of Kubernetes' built-in resources, with the
// names discovery gives it.
type builtinResource struct {
	Group, Plural, Singular, Kind string
	ShortNames                    []string
}

// GroupResource is "plural.group", or "plural" for the core group: how
// Lethe's selectors and Velero's tarball folders name a resource.
func (r *builtinResource) GroupResource() string {
	if r.Group == "" {
		return r.Plural
	}
	return r.Plural + "." + r.Group
}

// ResolveResource resolves a selector's resource name as Velero's
// discovery does (pkg/util/collections GetResourceIncludesExcludes, which
// asks the discovery REST mapper with its short-name expander): a
// plural, singular or short name, alone or followed by ".group"
// ("cm", "configmap", "deploy.apps", "deployments.apps"), is the
// built-in resource it names, by group priority when several groups
// have it (the core group first). It returns the resource's
// "plural.group" ("plural" in the core group), and false for a name that
// is not a built-in one (a custom resource, a glob, a typo), which is
// then used as it is.
//
// A plural without a group stays as it is (ok is true): Lethe's selectors
// match it in every group.
func ResolveResource(name string) (string, bool) {
	n := strings.ToLower(strings.TrimSpace(name))
	if n == "" || strings.ContainsAny(n, "*?[") {
		return name, false
	}
	res, group, qualified := strings.Cut(n, ".")
	if !qualified {
		for i := range builtinResources {
			if builtinResources[i].Plural == res {
				return res, true
			}
		}
	}
	for i := range builtinResources {
		r := &builtinResources[i]
		if qualified && r.Group != group {
			continue
		}
		if r.Plural == res || r.Singular == res || slices.Contains(r.ShortNames, res) {
			return r.GroupResource(), true
		}
	}
	return name, false
}

// csiSnapshotResources are the resources of the CSI snapshot API
// (snapshot.storage.k8s.io/v1). They are custom resources, not built-in
// ones, yet every cluster that takes CSI snapshots has them, and Velero's
// built-in CSI support writes them into its backups: a plugin that
// selects volumesnapshotcontents.snapshot.storage.k8s.io (as the example
// snapshot-files does) names them as discovery would, and is not warned
// about. They resolve after the built-in resources (the lowest group
// priority).
var csiSnapshotResources = []builtinResource{
	{Group: "snapshot.storage.k8s.io", Plural: "volumesnapshots", Singular: "volumesnapshot", Kind: "VolumeSnapshot", ShortNames: []string{"vs"}},
	{Group: "snapshot.storage.k8s.io", Plural: "volumesnapshotcontents", Singular: "volumesnapshotcontent", Kind: "VolumeSnapshotContent", ShortNames: []string{"vsc", "vscs"}},
	{Group: "snapshot.storage.k8s.io", Plural: "volumesnapshotclasses", Singular: "volumesnapshotclass", Kind: "VolumeSnapshotClass", ShortNames: []string{"vsclass", "vsclasses"}},
}

func init() { builtinResources = append(builtinResources, csiSnapshotResources...) }
