// Package manifest reads resource manifests in Kubernetes shape (kind,
// metadata, references, spec, status) from a file, a folder or stdin,
// as multi-document YAML or JSON, and validates each document on its own.
// An error names the document (source and index) and the field.
//
// It knows nothing of the catalog's contents: whether owners and
// reference targets exist, and owner cycles, are internal/apply's checks.
// Hostile input is bounded by Limits (size, documents, nesting, alias
// expansion).
package manifest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// KindBundle is the kind of a bundle document (see Bundle).
const KindBundle = "Bundle"

// APIVersion is the only apiVersion a document may give (it may give
// none): the one lethe get prints.
const APIVersion = "lethe.io/v1"

// IsList reports whether a decoded mapping is a list of documents: kind
// List, or a kind that ends in List (as lethe get prints a list:
// DatabaseList) with items and no metadata.
func IsList(m map[string]any) bool {
	k, _ := m["kind"].(string)
	if k == "List" {
		return true
	}
	_, items := m["items"]
	_, md := m["metadata"]
	return len(k) > len("List") && strings.HasSuffix(k, "List") && items && !md
}

// Document is one validated manifest.
type Document struct {
	// Source is the file name ("stdin" for -), Index the document's
	// 1-based position in it, Line its first line.
	Source string `json:"-"`
	Index  int    `json:"-"`
	Line   int    `json:"-"`
	// Field is the path of this document inside another one (a bundle
	// member: "spec.resources[2].object"), empty for a top-level one.
	Field string `json:"-"`
	// Container names the document that holds this one ("Bundle/shop"),
	// empty for a top-level one. Messages name the container.
	Container string `json:"-"`

	Kind       string          `json:"kind"`
	Metadata   Metadata        `json:"metadata"`
	References []Reference     `json:"references,omitempty"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"`
}

// Metadata is a document's metadata.
type Metadata struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	OwnerReferences []OwnerReference  `json:"ownerReferences,omitempty"`
	Finalizers      []string          `json:"finalizers,omitempty"`
	// ResourceVersion, when set (non-zero), is the version the author
	// last saw: applying fails if the stored one differs.
	ResourceVersion int64 `json:"resourceVersion,omitempty"`
}

// OwnerReference names an owner by kind and name. The owner is looked up
// in the dependent's namespace, then among cluster-scoped resources. UID,
// when given, must be the owner's.
type OwnerReference struct {
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid,omitempty"`
	BlockOwnerDeletion bool   `json:"blockOwnerDeletion,omitempty"`
}

// Reference names a target literally (an omitted namespace is
// cluster-scoped), with what happens when the target is deleted. Peer,
// when set, names the Lethe server that holds the target
// (docs/federation.md): such a reference is a forward edge, not part of
// the resource's own references.
type Reference struct {
	Kind           string                 `json:"kind"`
	Namespace      string                 `json:"namespace,omitempty"`
	Name           string                 `json:"name"`
	Peer           string                 `json:"peer,omitempty"`
	OnTargetDelete catalog.OnTargetDelete `json:"onTargetDelete"`
}

// PeerReferences are the document's references to resources on peers,
// as forward edges from the document's resource.
func (d *Document) PeerReferences() []catalog.PeerReference {
	var out []catalog.PeerReference
	for _, ref := range d.References {
		if ref.Peer != "" {
			out = append(out, catalog.PeerReference{
				Referrer: catalog.ObjectRef{Kind: d.Kind, Namespace: d.Metadata.Namespace, Name: d.Metadata.Name},
				Peer:     ref.Peer, Target: catalog.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name},
				OnTargetDelete: ref.OnTargetDelete})
		}
	}
	return out
}

// LocalReferences are the document's references inside this catalog.
func (d *Document) LocalReferences() []catalog.Reference {
	var out []catalog.Reference
	for _, ref := range d.References {
		if ref.Peer == "" {
			out = append(out, catalog.Reference{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, OnTargetDelete: ref.OnTargetDelete})
		}
	}
	return out
}

// Key is the catalog key the document names.
func (d *Document) Key() catalog.Key {
	return catalog.Key{Kind: d.Kind, Namespace: d.Metadata.Namespace, Name: d.Metadata.Name}
}

// Where names the document for messages: "app.yaml, document 2
// (VolumeSnapshot prod/snap-a)".
func (d *Document) Where() string {
	if d.Container != "" {
		return where(d.Source, d.Index, d.Container) + " " + d.Field
	}
	return where(d.Source, d.Index, d.Key().String())
}

// Errorf is an *Error about field of d (relative to d; d.Field is
// prepended).
func (d *Document) Errorf(field, format string, args ...any) *Error {
	doc := d.Key().String()
	if d.Container != "" {
		doc = d.Container
	}
	return &Error{Source: d.Source, Index: d.Index, Doc: doc, Field: join(d.Field, field), Msg: fmt.Sprintf(format, args...)}
}

// Resource is the document as a catalog resource, without owners (their
// uids come from the catalog) and without a uid.
func (d *Document) Resource() *catalog.Resource {
	r := &catalog.Resource{
		Kind: d.Kind, Namespace: d.Metadata.Namespace, Name: d.Metadata.Name,
		Labels: maps.Clone(d.Metadata.Labels), Annotations: maps.Clone(d.Metadata.Annotations),
		Finalizers: slices.Clone(d.Metadata.Finalizers),
		Spec:       slices.Clone(d.Spec), Status: slices.Clone(d.Status),
	}
	r.References = d.LocalReferences()
	return r
}

// TakeResource is Resource without the copies: the resource takes the
// document's labels, annotations, finalizers, spec and status, and the
// document keeps none of them. For a caller that holds tens of thousands
// of documents and needs each only once (apply).
func (d *Document) TakeResource() *catalog.Resource {
	r := &catalog.Resource{
		Kind: d.Kind, Namespace: d.Metadata.Namespace, Name: d.Metadata.Name,
		Labels: d.Metadata.Labels, Annotations: d.Metadata.Annotations, Finalizers: d.Metadata.Finalizers,
		Spec: d.Spec, Status: d.Status,
	}
	r.References = d.LocalReferences()
	d.Metadata.Labels, d.Metadata.Annotations, d.Metadata.Finalizers, d.Spec, d.Status = nil, nil, nil, nil, nil
	return r
}

// Error is a refused manifest: one line naming the source, the document
// and the field.
type Error struct {
	Source string
	Index  int // 1-based; 0 when the whole source is at fault
	Line   int
	Doc    string // kind/namespace/name when known
	Field  string
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(where(e.Source, e.Index, e.Doc))
	if e.Line > 0 && e.Doc == "" {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return strings.Join(strings.Fields(b.String()), " ")
}

// where names a document; the file name and kind/namespace/name are
// quoted when they are not plain text.
func where(source string, index int, doc string) string {
	s := termtext.Quote(source)
	if index > 0 {
		s += fmt.Sprintf(", document %d", index)
	}
	if doc != "" && doc != "/" {
		s += " (" + termtext.Quote(doc) + ")"
	}
	return s
}

func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	case strings.HasPrefix(b, "["):
		return a + b
	}
	return a + "." + b
}

// Load reads path (a file, a folder, or "-" for stdin) and returns every
// document, validated, in order. The first invalid document fails the
// whole load.
func Load(path string, stdin io.Reader, lim Limits) ([]*Document, error) {
	var out []*Document
	if err := loadEach(path, stdin, lim, func(d *Document) error {
		out = append(out, d)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// loadEach reads path as Load does and hands each validated document to
// fn as soon as it is built; fn may keep it or let it go. An error (the
// first invalid document) comes after fn has seen the documents before
// it.
func loadEach(path string, stdin io.Reader, lim Limits, fn func(*Document) error) error {
	srcs, err := Read(path, stdin, lim)
	if err != nil {
		return err
	}
	// Every source is prescanned before any is parsed: the bound of the
	// whole input comes first.
	total := 0
	for _, src := range srcs {
		n, err := prescan(src, lim)
		if err != nil {
			return err
		}
		if total += n; total > lim.MaxTotalValues {
			return fmt.Errorf("%s: more than %d values together; apply fewer files at once", sourceName(path), lim.MaxTotalValues)
		}
	}
	count := 0
	for i, src := range srcs {
		err := decode(src, lim, func(r raw) error {
			d, err := FromValue(src.Name, r.index, r.line, "", r.value)
			if err != nil {
				return err
			}
			if count++; count > lim.MaxDocuments {
				return fmt.Errorf("%s: more than %d documents", path, lim.MaxDocuments)
			}
			return fn(d)
		})
		if err != nil {
			return err
		}
		srcs[i].Data = nil // parsed: let it go
	}
	if count == 0 {
		return fmt.Errorf("%s: no documents", sourceName(path))
	}
	return nil
}

func sourceName(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}

// Parse decodes and validates the documents of one source.
func Parse(src Source, lim Limits) ([]*Document, error) {
	var out []*Document
	err := decode(src, lim, func(r raw) error {
		d, err := FromValue(src.Name, r.index, r.line, "", r.value)
		if err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// FromValue validates one decoded document (JSON-shaped data) found at
// field of document index of source.
func FromValue(source string, index, line int, field string, v any) (*Document, error) {
	d := &Document{Source: source, Index: index, Line: line, Field: field}
	p := &parser{d: d}
	p.document(v)
	if p.err != nil {
		return nil, p.err
	}
	if d.Kind == KindRetentionPolicy {
		if _, err := ParseRetentionPolicy(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// parser fills a Document, keeping the first error.
type parser struct {
	d   *Document
	err *Error
}

func (p *parser) fail(field, format string, args ...any) {
	if p.err == nil {
		p.err = p.d.Errorf(field, format, args...)
		p.err.Line = p.d.Line
	}
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// object checks that v is a mapping with only the allowed keys.
func (p *parser) object(v any, field string, allowed ...string) map[string]any {
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(field, "want a mapping, got %s", typeName(v))
		return nil
	}
	if !anyKey(m, func(k string, _ any) bool { return !slices.Contains(allowed, k) }) {
		return m
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, k) {
			hint := ""
			switch k {
			case "uid", "creationTimestamp", "deletionTimestamp", "generation", "managedFields":
				hint = " (set by Lethe, not by a manifest)"
			}
			p.fail(join(field, k), "unknown field%s; allowed: %s", hint, strings.Join(allowed, ", "))
			return nil
		}
	}
	return m
}

func (p *parser) str(m map[string]any, key, field string, required bool) string {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			p.fail(join(field, key), "required")
		}
		return ""
	}
	s, ok := v.(string)
	if !ok {
		p.fail(join(field, key), "want a string, got %s", typeName(v))
	}
	return s
}

func (p *parser) strMap(m map[string]any, key, field string) map[string]string {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	mm, ok := v.(map[string]any)
	if !ok {
		p.fail(join(field, key), "want a mapping of strings, got %s", typeName(v))
		return nil
	}
	out := make(map[string]string, len(mm))
	if !anyKey(mm, func(_ string, v any) bool { _, ok := v.(string); return !ok }) {
		for k, v := range mm {
			out[k] = v.(string)
		}
		return out
	}
	for _, k := range slices.Sorted(maps.Keys(mm)) {
		s, ok := mm[k].(string)
		if !ok {
			p.fail(fmt.Sprintf("%s[%q]", join(field, key), k), "want a string, got %s (quote it)", typeName(mm[k]))
			return nil
		}
		out[k] = s
	}
	return out
}

// anyKey reports whether bad holds for any entry of m. The checks of a
// mapping go through its keys in order, for the first error to be the
// same every time, only when one fails: a valid document sorts nothing
// (an 8 MiB file is 55,000 documents of several mappings each).
func anyKey[V any](m map[string]V, bad func(k string, v V) bool) bool {
	for k, v := range m {
		if bad(k, v) {
			return true
		}
	}
	return false
}

func (p *parser) list(m map[string]any, key, field string) []any {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		p.fail(join(field, key), "want a list, got %s", typeName(v))
	}
	return l
}

var kindRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

func validKind(k string) bool { return len(k) <= 63 && kindRE.MatchString(k) }

const kindHelp = "a kind is an upper-case letter, then letters and digits (e.g. VolumeSnapshot)"

func nameErr(name string) string {
	if len(name) > 253 {
		return fmt.Sprintf("invalid name (%d characters): a name has at most 253", len(name))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Sprintf("invalid name %q: use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit", name)
	}
	return ""
}

func namespaceErr(ns string) string {
	if len(ns) > 63 {
		return fmt.Sprintf("invalid namespace (%d characters): a namespace has at most 63", len(ns))
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Sprintf("invalid namespace %q: use lowercase letters, digits and '-', starting and ending with a letter or digit", ns)
	}
	return ""
}

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

// DeletionDelay is the document's lethe.io/deletion-delay, if any.
func (d *Document) DeletionDelay() (time.Duration, bool) {
	v, ok := d.Metadata.Annotations[catalog.AnnotationDeletionDelay]
	if !ok {
		return 0, false
	}
	dd, err := backup.ParseDuration(v)
	return dd, err == nil
}
