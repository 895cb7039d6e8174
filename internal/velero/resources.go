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
