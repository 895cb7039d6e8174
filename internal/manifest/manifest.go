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
	"maps"
	"slices"
	"strings"
	"time"

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

// DeletionDelay is the document's lethe.io/deletion-delay, if any.
func (d *Document) DeletionDelay() (time.Duration, bool) {
	v, ok := d.Metadata.Annotations[catalog.AnnotationDeletionDelay]
	if !ok {
		return 0, false
	}
	dd, err := backup.ParseDuration(v)
	return dd, err == nil
}
