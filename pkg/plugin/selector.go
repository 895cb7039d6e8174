package plugin

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// ResourceSelector selects the items an action receives. A zero selector
// matches every item.
//
//   - Namespaces: an empty IncludedNamespaces, or one containing "*", allows
//     every namespace; ExcludedNamespaces then removes some. A cluster-scoped
//     item matches only when the filter allows every namespace.
//   - Resources are group-qualified: "deployments.apps", or "pods" for the
//     core group. Globs work ("*.snapshot.storage.k8s.io", "*"). A pattern
//     without a dot matches that resource name in every group.
//   - LabelSelector is in Kubernetes syntax: "app=db,tier in (a,b),!legacy".
//   - Secrets (resource "secrets" of the core group) are least-privilege: a
//     selector matches them only when IncludedResources names "secrets"
//     literally. A zero selector, "*" or any other glob never does.
//   - Native volume snapshots (NativeVolumeSnapshotGroupResource) likewise
//     match only a selector whose IncludedResources names them literally.
type ResourceSelector struct {
	IncludedNamespaces []string
	ExcludedNamespaces []string
	IncludedResources  []string
	ExcludedResources  []string
	LabelSelector      string
}

// IsZero reports whether the selector matches everything.
func (s ResourceSelector) IsZero() bool {
	return len(s.IncludedNamespaces) == 0 && len(s.ExcludedNamespaces) == 0 &&
		len(s.IncludedResources) == 0 && len(s.ExcludedResources) == 0 &&
		strings.TrimSpace(s.LabelSelector) == ""
}

// String summarises the selector in one line, for listings.
func (s ResourceSelector) String() string {
	if s.IsZero() {
		return "all items"
	}
	var parts []string
	add := func(label string, v []string) {
		if len(v) > 0 {
			parts = append(parts, label+"="+strings.Join(v, ","))
		}
	}
	add("ns", s.IncludedNamespaces)
	add("!ns", s.ExcludedNamespaces)
	add("res", s.IncludedResources)
	add("!res", s.ExcludedResources)
	if l := strings.TrimSpace(s.LabelSelector); l != "" {
		parts = append(parts, "labels="+l)
	}
	return strings.Join(parts, " ")
}

// Matcher is a compiled ResourceSelector. It is safe for concurrent use.
type Matcher struct {
	allNamespaces bool
	includedNS    map[string]struct{}
	excludedNS    map[string]struct{}
	included      []string
	excluded      []string
	labels        labels.Selector
	secrets       bool // IncludedResources names "secrets" literally
	// nativeSnapshots: IncludedResources names NativeVolumeSnapshot items
	// literally.
	nativeSnapshots bool
}

// SecretsResource is the group-qualified resource of Secrets (core group),
// which a selector matches only when it names it literally.
const SecretsResource = "secrets"

// Compile validates the selector and returns its Matcher.
func (s ResourceSelector) Compile() (*Matcher, error) {
	m := &Matcher{
		includedNS: map[string]struct{}{},
		excludedNS: map[string]struct{}{},
	}
	includeAll := len(s.IncludedNamespaces) == 0
	for _, ns := range s.IncludedNamespaces {
		if ns == "*" {
			includeAll = true
			continue
		}
		m.includedNS[ns] = struct{}{}
	}
	if includeAll {
		m.includedNS = nil
	}
	for _, ns := range s.ExcludedNamespaces {
		if ns == "*" {
			return nil, fmt.Errorf("selector: excluded namespaces cannot contain %q", ns)
		}
		m.excludedNS[ns] = struct{}{}
	}
	m.allNamespaces = includeAll && len(m.excludedNS) == 0
	var err error
	if m.included, err = compilePatterns(s.IncludedResources); err != nil {
		return nil, err
	}
	if m.excluded, err = compilePatterns(s.ExcludedResources); err != nil {
		return nil, err
	}
	m.secrets = slices.Contains(m.included, SecretsResource)
	m.nativeSnapshots = slices.Contains(m.included, NativeVolumeSnapshotGroupResource) ||
		slices.Contains(m.included, NativeVolumeSnapshotResource)
	if slices.Contains(m.included, "*") {
		m.included = nil
	}
	if l := strings.TrimSpace(s.LabelSelector); l != "" {
		sel, err := labels.Parse(l)
		if err != nil {
			return nil, fmt.Errorf("selector: label selector %q: %w", l, err)
		}
		m.labels = sel
	}
	return m, nil
}

func compilePatterns(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, p := range in {
		p = strings.ToLower(strings.TrimSpace(p))
		if p == "" {
			return nil, fmt.Errorf("selector: empty resource pattern")
		}
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("selector: resource pattern %q: %w", p, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// MatchesResource reports whether the namespace and resource filters admit
// an item, before labels are looked at. The host uses it to decide cheaply
// which actions may want a (resource, namespace) pair. Core-group secrets
// match only a selector that names "secrets" literally, and native volume
// snapshots one that names "nativevolumesnapshots[.lethe.io]" literally.
func (m *Matcher) MatchesResource(groupResource, resource, namespace string) bool {
	if groupResource == SecretsResource && !m.secrets {
		return false
	}
	if groupResource == NativeVolumeSnapshotGroupResource && !m.nativeSnapshots {
		return false
	}
	if namespace == "" {
		if !m.allNamespaces {
			return false
		}
	} else {
		if m.includedNS != nil {
			if _, ok := m.includedNS[namespace]; !ok {
				return false
			}
		}
		if _, ok := m.excludedNS[namespace]; ok {
			return false
		}
	}
	if len(m.included) > 0 && !matchAny(m.included, groupResource, resource) {
		return false
	}
	if matchAny(m.excluded, groupResource, resource) {
		return false
	}
	return true
}

// HasLabelSelector reports whether the matcher looks at labels.
func (m *Matcher) HasLabelSelector() bool { return m.labels != nil && !m.labels.Empty() }

// MatchesLabels reports whether the label selector admits the labels.
func (m *Matcher) MatchesLabels(l map[string]string) bool {
	if m.labels == nil {
		return true
	}
	return m.labels.Matches(labels.Set(l))
}

// Matches reports whether the selector admits an item with these labels.
func (m *Matcher) Matches(it Item, itemLabels map[string]string) bool {
	return m.MatchesResource(it.GroupResource(), it.Resource, it.Namespace) && m.MatchesLabels(itemLabels)
}

func matchAny(patterns []string, groupResource, resource string) bool {
	for _, p := range patterns {
		subject := groupResource
		if !strings.Contains(p, ".") {
			subject = resource
		}
		if ok, _ := path.Match(p, subject); ok {
			return true
		}
	}
	return false
}
