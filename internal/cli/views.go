package cli

import (
	"encoding/json"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// The object of a catalog resource, as get, backup get and describe print
// it (docs/output.md): a manifest that apply takes back (kind, metadata,
// references, spec, status), with what Lethe sets read-only: metadata.uid,
// creationTimestamp and deletionTimestamp, and the lifecycle block. apply
// ignores those, as kubectl apply ignores server-set metadata.

// objectMeta is an object's metadata.
type objectMeta struct {
	Name              string             `json:"name"`
	Namespace         string             `json:"namespace,omitempty"`
	UID               string             `json:"uid"`
	ResourceVersion   int64              `json:"resourceVersion,omitempty"`
	CreationTimestamp time.Time          `json:"creationTimestamp"`
	DeletionTimestamp *time.Time         `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string  `json:"labels,omitempty"`
	Annotations       map[string]string  `json:"annotations,omitempty"`
	OwnerReferences   []catalog.OwnerRef `json:"ownerReferences,omitempty"`
	Finalizers        []string           `json:"finalizers,omitempty"`
}

// referenceView is a reference as a manifest writes it (the target's uid
// is the catalog's business).
type referenceView struct {
	Kind           string                 `json:"kind"`
	Namespace      string                 `json:"namespace,omitempty"`
	Name           string                 `json:"name"`
	OnTargetDelete catalog.OnTargetDelete `json:"onTargetDelete"`
}

// lifecycleView is where a resource is in Lethe's lifecycle; read-only.
type lifecycleView struct {
	Phase             catalog.Phase       `json:"phase"`
	DeletionDueAt     *time.Time          `json:"deletionDueAt,omitempty"`
	PropagationPolicy catalog.Propagation `json:"propagationPolicy,omitempty"`
	// DeletionRoot is the resource whose requested deletion reached this
	// one through a cascade.
	DeletionRoot *catalog.ObjectRef  `json:"deletionRoot,omitempty"`
	Conditions   []catalog.Condition `json:"conditions,omitempty"`
	UpdatedAt    time.Time           `json:"updatedAt"`
}

// resourceView is the object of a catalog resource of any kind but
// Backup; its kind is the resource's.
type resourceView struct {
	Metadata   objectMeta      `json:"metadata"`
	References []referenceView `json:"references,omitempty"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"`
	Lifecycle  lifecycleView   `json:"lifecycle"`
}

func metaOf(r *catalog.Resource) objectMeta {
	return objectMeta{
		Name: r.Name, Namespace: r.Namespace, UID: r.UID, ResourceVersion: r.ResourceVersion,
		CreationTimestamp: r.CreatedAt, DeletionTimestamp: r.DeletionTimestamp,
		Labels: r.Labels, Annotations: r.Annotations, OwnerReferences: r.Owners, Finalizers: r.Finalizers,
	}
}

func newResourceView(r *catalog.Resource) *resourceView {
	v := &resourceView{
		Metadata: metaOf(r), Spec: r.Spec, Status: r.Status,
		Lifecycle: lifecycleView{Phase: r.Phase, DeletionDueAt: r.DeletionDueAt, PropagationPolicy: r.PropagationPolicy,
			DeletionRoot: r.DeletionRoot, Conditions: r.Conditions, UpdatedAt: r.UpdatedAt},
	}
	for _, ref := range r.References {
		v.References = append(v.References, referenceView{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, OnTargetDelete: ref.OnTargetDelete})
	}
	return v
}

// backupObject is the object of a backup: get backup X and backup get X
// print the same one. Its lifecycle holds, besides the phase, what its
// deletion did so far.
type backupObject struct {
	Metadata  objectMeta          `json:"metadata"`
	Spec      backup.Spec         `json:"spec"`
	Status    backup.Status       `json:"status"`
	Lifecycle backupLifecycleView `json:"lifecycle"`
}

type backupLifecycleView struct {
	lifecycleView
	Progress  *catalog.DeletionProgress `json:"deletionProgress,omitempty"`
	Unsettled []catalog.ItemOutcome     `json:"unsettled,omitempty"`
	// PluginMissing is the message of the PluginMissing condition: the
	// daemon refuses to run the deletion until the plugins it names are
	// installed.
	PluginMissing string `json:"pluginMissing,omitempty"`
	// Retry summarizes the backup's rows in the retry queue.
	Retry *retrySummary `json:"retry,omitempty"`
}

func (v *backupView) object() *backupObject {
	r := v.resource
	m := metaOf(r)
	m.CreationTimestamp = v.CreatedAt
	return &backupObject{
		Metadata: m, Spec: v.Spec, Status: v.Status,
		Lifecycle: backupLifecycleView{
			lifecycleView: lifecycleView{Phase: r.Phase, DeletionDueAt: r.DeletionDueAt, PropagationPolicy: r.PropagationPolicy,
				DeletionRoot: r.DeletionRoot, Conditions: r.Conditions, UpdatedAt: r.UpdatedAt},
			Progress: v.Progress, Unsettled: v.Unsettled, PluginMissing: v.PluginMissing, Retry: v.Retry,
		},
	}
}

func backupObjects(vs []*backupView) []*backupObject {
	out := make([]*backupObject, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.object())
	}
	return out
}

// keyView names the resource a row (an audit entry, a change, a plan
// step) is about; the row's own kind is the row's.
type keyView struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// Kinds of the structured output of delete and explain.
const (
	kindDeletionResult = "DeletionResult"
	kindCascadePlan    = "CascadePlan"
	kindExplanation    = "Explanation"
)

// deletionResultView is what delete KIND NAME did: scheduled, requested,
// purged or stuck (with the explanation).
type deletionResultView struct {
	Resource    catalog.Key `json:"resource"`
	Result      string      `json:"result"`
	Note        string      `json:"note,omitempty"`
	Explanation any         `json:"explanation,omitempty"`
}
