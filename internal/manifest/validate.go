package manifest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// KindLocationStatus is the kind of what 'lethe location list' and
// 'lethe location get' print with -o json|yaml: a location's check, made
// then, with its backups counted; a report, not a resource, so that
// BackupStorageLocation keeps one shape (the catalog's record).
const KindLocationStatus = "LocationStatus"

// maxAnnotationsBytes is Kubernetes' cap on a resource's annotations.
const maxAnnotationsBytes = 256 << 10

func (p *parser) document(v any) {
	if m, ok := v.(map[string]any); ok && IsList(m) {
		p.fail("kind", "a List may not be nested")
		return
	}
	if m, ok := v.(map[string]any); ok && m["kind"] == KindLocationStatus {
		p.fail("kind", "a %s is what 'lethe location get' prints, a check made then, not a resource: apply does not take it ('lethe get backupstoragelocation NAME -o yaml' prints the record apply takes back)", KindLocationStatus)
		return
	}
	// apiVersion (lethe.io/v1, or none) and lifecycle (Lethe's, read-only,
	// as lethe get prints it) are accepted and not stored.
	m := p.object(v, "", "apiVersion", "kind", "metadata", "references", "spec", "status", "lifecycle")
	if m == nil {
		return
	}
	if av, ok := m["apiVersion"]; ok && av != APIVersion {
		p.fail("apiVersion", "want %s (or leave it out), got %s", APIVersion, termtext.Quote(fmt.Sprint(av)))
		return
	}
	d := p.d
	d.Kind = p.str(m, "kind", "", true)
	if p.err == nil && !validKind(d.Kind) {
		p.fail("kind", "invalid kind %q: %s", d.Kind, kindHelp)
	}
	if p.err != nil {
		return
	}
	if _, ok := m["metadata"]; !ok {
		p.fail("metadata", "required (with at least a name)")
		return
	}
	p.metadata(m["metadata"])
	p.references(p.list(m, "references", ""))
	for _, key := range []string{"spec", "status"} {
		raw, ok := m[key]
		if !ok || raw == nil || p.err != nil {
			continue
		}
		if _, ok := raw.(map[string]any); !ok {
			p.fail(key, "want a mapping, got %s", typeName(raw))
			return
		}
		b, err := toJSON(raw)
		if err != nil {
			p.fail(key, "%v", err)
			return
		}
		if key == "spec" {
			d.Spec = b
		} else {
			d.Status = b
		}
	}
}

func (p *parser) metadata(v any) {
	const f = "metadata"
	// uid, creationTimestamp and deletionTimestamp are Lethe's: accepted
	// (as lethe get prints them) and ignored, as kubectl apply ignores
	// server-set metadata.
	m := p.object(v, f, "name", "namespace", "labels", "annotations", "ownerReferences", "finalizers", "resourceVersion",
		"uid", "creationTimestamp", "deletionTimestamp")
	if m == nil {
		return
	}
	md := &p.d.Metadata
	md.Name = p.str(m, "name", f, true)
	md.Namespace = p.str(m, "namespace", f, false)
	if p.err != nil {
		return
	}
	if e := nameErr(md.Name); e != "" {
		p.fail(f+".name", "%s", e)
	}
	if md.Namespace != "" {
		if e := namespaceErr(md.Namespace); e != "" {
			p.fail(f+".namespace", "%s", e)
		}
	}
	md.Labels = p.strMap(m, "labels", f)
	if anyKey(md.Labels, func(k, v string) bool {
		return len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0
	}) {
		for _, k := range slices.Sorted(maps.Keys(md.Labels)) {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				p.fail(fmt.Sprintf("%s.labels[%q]", f, k), "invalid label key: use an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
			} else if errs := validation.IsValidLabelValue(md.Labels[k]); len(errs) > 0 {
				p.fail(fmt.Sprintf("%s.labels[%q]", f, k), "invalid label value %q: empty, or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", md.Labels[k])
			}
		}
	}
	md.Annotations = p.strMap(m, "annotations", f)
	size := 0
	for _, k := range slices.Sorted(maps.Keys(md.Annotations)) {
		size += len(k) + len(md.Annotations[k])
		field := fmt.Sprintf("%s.annotations[%q]", f, k)
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			p.fail(field, "invalid annotation key: use an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.'")
		}
		// lethe.io/deletion-scheduled-at is Lethe's: taken as get prints
		// it, and apply refuses it unless the stored resource has it
		// (SetByLethe).
		if k == catalog.AnnotationDeletionDelay {
			if _, err := backup.ParseDuration(md.Annotations[k]); err != nil {
				p.fail(field, "%v", err)
			}
		}
	}
	if size > maxAnnotationsBytes {
		p.fail(f+".annotations", "%d bytes in all, at most %d", size, maxAnnotationsBytes)
	}
	p.owners(p.list(m, "ownerReferences", f))
	for i, x := range p.list(m, "finalizers", f) {
		field := fmt.Sprintf("%s.finalizers[%d]", f, i)
		s, ok := x.(string)
		if !ok {
			p.fail(field, "want a string, got %s", typeName(x))
			break
		}
		if errs := validation.IsQualifiedName(s); len(errs) > 0 || !strings.Contains(s, "/") {
			p.fail(field, "invalid finalizer %q: use a domain-qualified name such as example.com/drain", s)
		} else if slices.Contains(md.Finalizers, s) {
			p.fail(field, "finalizer %q appears twice", s)
		}
		md.Finalizers = append(md.Finalizers, s)
	}
	if rv, ok := m["resourceVersion"]; ok && rv != nil {
		field := f + ".resourceVersion"
		switch x := rv.(type) {
		case int64:
			md.ResourceVersion = x
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				p.fail(field, "want a number, got %q", x)
			}
			md.ResourceVersion = n
		default:
			p.fail(field, "want a number, got %s", typeName(rv))
		}
		if md.ResourceVersion <= 0 && p.err == nil {
			p.fail(field, "must be positive (leave it out to apply without checking)")
		}
	}
}

func (p *parser) owners(l []any) {
	md := &p.d.Metadata
	for i, x := range l {
		field := fmt.Sprintf("metadata.ownerReferences[%d]", i)
		m := p.object(x, field, "kind", "name", "uid", "blockOwnerDeletion")
		if m == nil {
			return
		}
		o := OwnerReference{Kind: p.str(m, "kind", field, true), Name: p.str(m, "name", field, true), UID: p.str(m, "uid", field, false)}
		if b, ok := m["blockOwnerDeletion"]; ok && b != nil {
			bb, ok := b.(bool)
			if !ok {
				p.fail(field+".blockOwnerDeletion", "want true or false, got %s", typeName(b))
			}
			o.BlockOwnerDeletion = bb
		}
		if p.err != nil {
			return
		}
		switch {
		case !validKind(o.Kind):
			p.fail(field+".kind", "invalid kind %q: %s", o.Kind, kindHelp)
		case nameErr(o.Name) != "":
			p.fail(field+".name", "%s", nameErr(o.Name))
		case o.Kind == p.d.Kind && o.Name == md.Name:
			p.fail(field, "owner cycle: %s owns itself", p.d.Key())
		}
		for _, prev := range md.OwnerReferences {
			if prev.Kind == o.Kind && prev.Name == o.Name {
				p.fail(field, "owner %s/%s appears twice", o.Kind, o.Name)
			}
		}
		md.OwnerReferences = append(md.OwnerReferences, o)
	}
}

func (p *parser) references(l []any) {
	for i, x := range l {
		field := fmt.Sprintf("references[%d]", i)
		m := p.object(x, field, "kind", "namespace", "name", "peer", "onTargetDelete")
		if m == nil {
			return
		}
		r := Reference{Kind: p.str(m, "kind", field, true), Namespace: p.str(m, "namespace", field, false),
			Name: p.str(m, "name", field, true), Peer: p.str(m, "peer", field, false),
			OnTargetDelete: catalog.OnTargetDelete(p.str(m, "onTargetDelete", field, true))}
		if p.err != nil {
			return
		}
		switch {
		case !validKind(r.Kind):
			p.fail(field+".kind", "invalid kind %q: %s", r.Kind, kindHelp)
		case nameErr(r.Name) != "":
			p.fail(field+".name", "%s", nameErr(r.Name))
		case r.Namespace != "" && namespaceErr(r.Namespace) != "":
			p.fail(field+".namespace", "%s", namespaceErr(r.Namespace))
		case r.Peer != "" && len(validation.IsDNS1123Subdomain(r.Peer)) > 0:
			p.fail(field+".peer", "invalid peer name %q: a lower-case DNS name, as in the federation configuration", r.Peer)
		}
		switch r.OnTargetDelete {
		case catalog.RefBlock, catalog.RefUnset, catalog.RefCascade, catalog.RefAllowDangling:
		default:
			p.fail(field+".onTargetDelete", "invalid policy %q: use block, unset, cascade or allowDangling", r.OnTargetDelete)
		}
		for _, prev := range p.d.References {
			if prev.Kind == r.Kind && prev.Namespace == r.Namespace && prev.Name == r.Name && prev.Peer == r.Peer {
				p.fail(field, "a second reference to %s%s", catalog.Key{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}, onPeer(r.Peer))
			}
		}
		if r.Peer == "" && r.Kind == p.d.Kind && r.Namespace == p.d.Metadata.Namespace && r.Name == p.d.Metadata.Name {
			p.fail(field, "a resource cannot reference itself")
		}
		p.d.References = append(p.d.References, r)
	}
}

func onPeer(peer string) string {
	if peer == "" {
		return ""
	}
	return " on peer " + peer
}
