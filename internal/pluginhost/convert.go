package pluginhost

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lethehq/lethe/pkg/plugin"
	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

func selectorFromProto(s *pluginv1.ResourceSelector) plugin.ResourceSelector {
	return plugin.ResourceSelector{
		IncludedNamespaces: s.GetIncludedNamespaces(),
		ExcludedNamespaces: s.GetExcludedNamespaces(),
		IncludedResources:  s.GetIncludedResources(),
		ExcludedResources:  s.GetExcludedResources(),
		LabelSelector:      s.GetLabelSelector(),
	}
}

func backupToProto(b plugin.Backup) *pluginv1.Backup {
	out := &pluginv1.Backup{
		Name:            b.Name,
		Uid:             b.UID,
		Labels:          b.Labels,
		Annotations:     b.Annotations,
		StorageLocation: b.StorageLocation,
		SourceUid:       b.SourceUID,
	}
	if !b.CreatedAt.IsZero() {
		out.CreatedAt = timestamppb.New(b.CreatedAt)
	}
	if !b.SourceCreatedAt.IsZero() {
		out.SourceCreatedAt = timestamppb.New(b.SourceCreatedAt)
	}
	if !b.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(b.ExpiresAt)
	}
	return out
}

// itemToProto fills m, a zero Item, from it.
func itemToProto(m *pluginv1.Item, it Item) {
	m.Id = it.ID
	m.Group, m.Version, m.Resource, m.Kind = it.Item.Group, it.Item.Version, it.Item.Resource, it.Item.Kind
	m.Namespace, m.Name, m.Object = it.Item.Namespace, it.Item.Name, it.Item.Object
}

func resultFromProto(r *pluginv1.ItemResult) Result {
	out := Result{ID: r.GetId()}
	out.Message = sanitizeMessage(r.GetMessage())
	switch r.GetOutcome() {
	case pluginv1.Outcome_OUTCOME_DONE:
		out.Outcome = plugin.OutcomeDone
	case pluginv1.Outcome_OUTCOME_BLOCKED:
		out.Outcome = plugin.OutcomeBlocked
		out.RetryAfter = r.GetRetryAfter().AsDuration()
	case pluginv1.Outcome_OUTCOME_SKIPPED:
		out.Outcome = plugin.OutcomeSkipped
	default:
		out.Outcome = plugin.OutcomeFailed
		if out.Message == "" {
			out.Message = "plugin reported outcome " + r.GetOutcome().String()
		}
	}
	return out
}
