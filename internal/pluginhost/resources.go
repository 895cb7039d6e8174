package pluginhost

import (
	"slices"
	"strings"

	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/pkg/plugin"
)

// ResolveSelector resolves the resource names of a plugin's selector as
// Velero resolves a plugin's AppliesTo through discovery
// (velero.ResolveResource): "cm", "configmap" and "configmaps" all
// select ConfigMaps, "deploy" and "deploy.apps" Deployments. A name that
// is not a built-in resource is kept as it is: it selects the items of
// the tarball's resources/<plural>.<group>/ folders it names (a custom
// resource), and is returned in unresolved, sorted, for a warning. Globs
// are kept, and never reported.
func ResolveSelector(sel plugin.ResourceSelector) (resolved plugin.ResourceSelector, unresolved []string) {
	resolved = sel
	resolve := func(in []string) []string {
		if in == nil {
			return nil
		}
		out := make([]string, len(in))
		for i, n := range in {
			r, ok := velero.ResolveResource(n)
			out[i] = r
			if !ok && !strings.ContainsAny(n, "*?[") && strings.TrimSpace(n) != "" && !slices.Contains(unresolved, n) {
				unresolved = append(unresolved, n)
			}
		}
		return out
	}
	resolved.IncludedResources = resolve(sel.IncludedResources)
	resolved.ExcludedResources = resolve(sel.ExcludedResources)
	slices.Sort(unresolved)
	return resolved, unresolved
}
