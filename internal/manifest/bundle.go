package manifest

import (
	"encoding/json"
	"fmt"
)

// Bundle is a document of kind Bundle: a named set of resources, after
// Smith's. Its spec is {resources: [{name, object}]}: name is the
// member's name within the bundle, object a manifest as for apply (its
// metadata.name defaults to the member's name).
type Bundle struct {
	Doc     *Document
	Members []*Member
}

// Member is one resource of a bundle.
type Member struct {
	Name string
	Doc  *Document
}

// ParseBundle validates a Bundle document's spec: member names unique and
// valid, each object a valid manifest, no two members naming one resource,
// no nested bundles.
func ParseBundle(d *Document) (*Bundle, error) {
	if d.Kind != KindBundle {
		return nil, d.Errorf("kind", "not a %s", KindBundle)
	}
	if len(d.Metadata.OwnerReferences) > 0 {
		return nil, d.Errorf("metadata.ownerReferences", "a bundle has no owners")
	}
	if len(d.Status) > 0 {
		return nil, d.Errorf("status", "a bundle's status is Lethe's to write")
	}
	var spec any
	if len(d.Spec) == 0 {
		return nil, d.Errorf("spec", "required: a bundle needs spec.resources (it may be empty: [])")
	}
	if err := json.Unmarshal(d.Spec, &spec); err != nil {
		return nil, d.Errorf("spec", "%v", err)
	}
	p := &parser{d: d}
	m := p.object(spec, "spec", "resources")
	if p.err != nil {
		return nil, p.err
	}
	raw, ok := m["resources"]
	if !ok || raw == nil {
		return nil, d.Errorf("spec.resources", "required (it may be empty: [])")
	}
	items, ok := raw.([]any)
	if !ok {
		return nil, d.Errorf("spec.resources", "want a list, got %s", typeName(raw))
	}
	b := &Bundle{Doc: d}
	names := map[string]int{}
	keys := map[string]int{}
	for i, it := range items {
		field := fmt.Sprintf("spec.resources[%d]", i)
		mm := p.object(it, field, "name", "object")
		if p.err != nil {
			return nil, p.err
		}
		name := p.str(mm, "name", field, true)
		if p.err != nil {
			return nil, p.err
		}
		if e := nameErr(name); e != "" {
			return nil, d.Errorf(field+".name", "%s", e)
		}
		if j, dup := names[name]; dup {
			return nil, d.Errorf(field+".name", "member %q appears twice (also spec.resources[%d])", name, j)
		}
		names[name] = i
		obj, ok := mm["object"].(map[string]any)
		if !ok {
			return nil, d.Errorf(field+".object", "required: the member's manifest (kind, metadata, spec, ...)")
		}
		// The member's name stands in for an omitted metadata.name.
		if md, ok := obj["metadata"].(map[string]any); ok {
			if _, has := md["name"]; !has {
				md["name"] = name
			}
		} else if _, has := obj["metadata"]; !has {
			obj["metadata"] = map[string]any{"name": name}
		}
		md, err := FromValue(d.Source, d.Index, d.Line, join(d.Field, field+".object"), obj)
		if err != nil {
			err.(*Error).Doc = d.Key().String()
			return nil, err
		}
		md.Container = d.Key().String()
		if md.Kind == KindBundle {
			return nil, d.Errorf(field+".object.kind", "a bundle cannot hold a bundle")
		}
		if md.Metadata.ResourceVersion != 0 {
			return nil, d.Errorf(field+".object.metadata.resourceVersion", "not allowed in a bundle member: the bundle owns its members' state")
		}
		k := md.Key().String()
		if j, dup := keys[k]; dup {
			return nil, d.Errorf(field+".object", "%s is also member spec.resources[%d]", k, j)
		}
		keys[k] = i
		b.Members = append(b.Members, &Member{Name: name, Doc: md})
	}
	return b, nil
}
