// Package view holds the objects Lethe shows: what -o json|yaml prints
// and the API (internal/api) serves, in one schema (docs/output.md). It
// turns catalog rows into those objects; it must not print, nor import
// internal/cli.
package view

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
)

// The object of a catalog resource, as get, backup get and describe print
// it (docs/output.md): a manifest that apply takes back (kind, metadata,
// references, spec, status), with what Lethe sets read-only: metadata.uid,
// creationTimestamp and deletionTimestamp, and the lifecycle block. apply
// ignores those, as kubectl apply ignores server-set metadata.

// Meta is an object's metadata.
type Meta struct {
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

// Reference is a reference as a manifest writes it (the target's uid
// is the catalog's business).
type Reference struct {
	Kind           string                 `json:"kind"`
	Namespace      string                 `json:"namespace,omitempty"`
	Name           string                 `json:"name"`
	OnTargetDelete catalog.OnTargetDelete `json:"onTargetDelete"`
}

// Lifecycle is where a resource is in Lethe's lifecycle; read-only.
type Lifecycle struct {
	Phase             catalog.Phase       `json:"phase"`
	DeletionDueAt     *time.Time          `json:"deletionDueAt,omitempty"`
	PropagationPolicy catalog.Propagation `json:"propagationPolicy,omitempty"`
	// DeletionRoot is the resource whose requested deletion reached this
	// one through a cascade.
	DeletionRoot *catalog.ObjectRef  `json:"deletionRoot,omitempty"`
	Conditions   []catalog.Condition `json:"conditions,omitempty"`
	UpdatedAt    time.Time           `json:"updatedAt"`
}

// Resource is the object of a catalog resource of any kind but
// Backup; its kind is the resource's.
type Resource struct {
	Metadata   Meta            `json:"metadata"`
	References []Reference     `json:"references,omitempty"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"`
	Lifecycle  Lifecycle       `json:"lifecycle"`
}

func MetaOf(r *catalog.Resource) Meta {
	return Meta{
		Name: r.Name, Namespace: r.Namespace, UID: r.UID, ResourceVersion: r.ResourceVersion,
		CreationTimestamp: r.CreatedAt, DeletionTimestamp: r.DeletionTimestamp,
		Labels: r.Labels, Annotations: r.Annotations, OwnerReferences: r.Owners, Finalizers: r.Finalizers,
	}
}

func NewResource(r *catalog.Resource) *Resource {
	v := &Resource{
		Metadata: MetaOf(r), Spec: r.Spec, Status: r.Status,
		Lifecycle: Lifecycle{Phase: r.Phase, DeletionDueAt: r.DeletionDueAt, PropagationPolicy: r.PropagationPolicy,
			DeletionRoot: r.DeletionRoot, Conditions: r.Conditions, UpdatedAt: r.UpdatedAt},
	}
	for _, ref := range r.References {
		v.References = append(v.References, Reference{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, OnTargetDelete: ref.OnTargetDelete})
	}
	return v
}

// BackupObject is the object of a backup: get backup X and backup get X
// print the same one. Its lifecycle holds, besides the phase, what its
// deletion did so far.
type BackupObject struct {
	Metadata  Meta            `json:"metadata"`
	Spec      backup.Spec     `json:"spec"`
	Status    backup.Status   `json:"status"`
	Lifecycle BackupLifecycle `json:"lifecycle"`
}

type BackupLifecycle struct {
	Lifecycle
	Progress  *catalog.DeletionProgress `json:"deletionProgress,omitempty"`
	Unsettled []catalog.ItemOutcome     `json:"unsettled,omitempty"`
	// PluginMissing is the message of the PluginMissing condition: the
	// daemon refuses to run the deletion until the plugins it names are
	// installed.
	PluginMissing string `json:"pluginMissing,omitempty"`
	// Retry summarizes the backup's rows in the retry queue.
	Retry *RetrySummary `json:"retry,omitempty"`
}

// Object is the backup's object (-o json|yaml, the API).
func (v *Backup) Object() *BackupObject {
	r := v.Resource
	m := MetaOf(r)
	m.CreationTimestamp = v.CreatedAt
	return &BackupObject{
		Metadata: m, Spec: v.Spec, Status: v.Status,
		Lifecycle: BackupLifecycle{
			Lifecycle: Lifecycle{Phase: r.Phase, DeletionDueAt: r.DeletionDueAt, PropagationPolicy: r.PropagationPolicy,
				DeletionRoot: r.DeletionRoot, Conditions: r.Conditions, UpdatedAt: r.UpdatedAt},
			Progress: v.Progress, Unsettled: v.Unsettled, PluginMissing: v.PluginMissing, Retry: v.Retry,
		},
	}
}

func BackupObjects(vs []*Backup) []*BackupObject {
	out := make([]*BackupObject, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.Object())
	}
	return out
}

// Key names the resource a row (an audit entry, a change, a plan
// step) is about; the row's own kind is the row's.
type Key struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// Backup is a backup as the CLI's tables show it; its object (-o
// json|yaml, the API) is Object().
type Backup struct {
	Resource    *catalog.Resource         `json:"-"`
	Kind        string                    `json:"kind"` // always "Backup"
	Name        string                    `json:"name"`
	UID         string                    `json:"uid"`
	Phase       catalog.Phase             `json:"phase"`
	Labels      map[string]string         `json:"labels,omitempty"`
	Annotations map[string]string         `json:"annotations,omitempty"`
	CreatedAt   time.Time                 `json:"createdAt"`
	Spec        backup.Spec               `json:"spec"`
	Status      backup.Status             `json:"status"`
	DueAt       *time.Time                `json:"deletionDueAt,omitempty"`
	DeletingAt  *time.Time                `json:"deletionTimestamp,omitempty"`
	Finalizers  []string                  `json:"finalizers,omitempty"`
	Conditions  []catalog.Condition       `json:"conditions,omitempty"`
	Progress    *catalog.DeletionProgress `json:"deletionProgress,omitempty"`
	Unsettled   []catalog.ItemOutcome     `json:"unsettled,omitempty"`
	// PluginMissing is the message of the PluginMissing condition: the
	// daemon refuses to run the deletion until the plugins it names are
	// installed.
	PluginMissing string `json:"pluginMissing,omitempty"`
	// Retry summarizes the backup's rows in the retry queue.
	Retry *RetrySummary `json:"retry,omitempty"`
}

// RetrySummary is what the retry queue holds for one backup.
type RetrySummary struct {
	// NextAttemptAt is when the daemon next runs the deletion: the latest
	// next attempt of the waiting rows (they run together).
	NextAttemptAt *time.Time `json:"nextAttemptAt,omitempty"`
	Waiting       int        `json:"waiting"`
	Running       int        `json:"running"`
	Discarded     int        `json:"discarded"`
	IDs           []int64    `json:"ids"`
}

// BackupReader is what NewBackup reads besides the resource.
type BackupReader interface {
	LoadProgress(ctx context.Context, uid string) (*catalog.DeletionProgress, []catalog.ItemOutcome, error)
	ListRetries(ctx context.Context, f catalog.RetryFilter) ([]*catalog.RetryRow, error)
}

// NewBackup is the view of the backup r: with its deletion's progress and
// retry rows while Deleting, and its unsettled items with withRows.
func NewBackup(ctx context.Context, st BackupReader, r *catalog.Resource, withRows bool) (*Backup, error) {
	b, err := backup.FromResource(r)
	if err != nil {
		return nil, err
	}
	v := &Backup{
		Resource: r, Kind: backup.Kind, Name: r.Name, UID: r.UID, Phase: r.Phase, Labels: r.Labels, Annotations: r.Annotations,
		CreatedAt: b.Created(), Spec: b.Spec, Status: b.Status, DueAt: r.DeletionDueAt,
		DeletingAt: r.DeletionTimestamp, Finalizers: r.Finalizers, Conditions: r.Conditions,
	}
	v.PluginMissing, _ = deletion.PluginMissing(r)
	if r.Phase == catalog.PhaseDeleting {
		if v.Retry, err = RetrySummaryOf(ctx, st, r.UID); err != nil {
			return nil, err
		}
		p, rows, err := st.LoadProgress(ctx, r.UID)
		if err == nil {
			v.Progress = p
			if withRows {
				v.Unsettled = rows
			}
		} else if !errors.Is(err, catalog.ErrNotFound) {
			return nil, err
		}
	}
	return v, nil
}

// RetrySummaryOf summarizes the retry rows of the backup uid (nil: none).
func RetrySummaryOf(ctx context.Context, st BackupReader, uid string) (*RetrySummary, error) {
	rows, err := st.ListRetries(ctx, catalog.RetryFilter{OwnerUID: uid})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	s := &RetrySummary{}
	for _, r := range rows {
		s.IDs = append(s.IDs, r.ID)
		switch r.State {
		case catalog.RetryRetryable:
			s.Waiting++
			if s.NextAttemptAt == nil || r.NextAttemptAt.After(*s.NextAttemptAt) {
				t := r.NextAttemptAt
				s.NextAttemptAt = &t
			}
		case catalog.RetryRunning:
			s.Running++
		case catalog.RetryDiscarded:
			s.Discarded++
		}
	}
	return s, nil
}

// ObjectOf is r's object as get prints it: a backup's (with its
// deletion's progress, and with withRows its unsettled items), or the
// resource view of any other kind.
func ObjectOf(ctx context.Context, st BackupReader, r *catalog.Resource, withRows bool) (Object, error) {
	if r.Kind == backup.Kind {
		v, err := NewBackup(ctx, st, r, withRows)
		if err != nil {
			return nil, err
		}
		return ToObject(r.Kind, v.Object())
	}
	return ToObject(r.Kind, NewResource(r))
}
