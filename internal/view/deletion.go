package view

import (
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/gc"
)

// Kinds of the structured output of backup delete.
const (
	DeletionReportKind = "DeletionReport"
	DeletionPlanKind   = "DeletionPlan"
)

// DeletionReport is the JSON and YAML shape of a deletion's report: camelCase,
// with kind, and no zero times.
type DeletionReport struct {
	Kind           string                          `json:"kind"`
	Backup         string                          `json:"backup"`
	Result         deletion.Result                 `json:"result"`
	DueAt          *time.Time                      `json:"dueAt,omitempty"`
	TotalItems     int64                           `json:"totalItems"`
	Counts         map[string]catalog.OutcomeCount `json:"counts,omitempty"`
	Unsettled      []catalog.ItemOutcome           `json:"unsettled,omitempty"`
	UnsettledCount int                             `json:"unsettledCount"`
	NotSent        int64                           `json:"notSent,omitempty"`
	TarballProblem string                          `json:"tarballProblem,omitempty"`
	// VolumeSnapshotsSent counts the native volume snapshots sent to
	// their plugins although the tarball was gone.
	VolumeSnapshotsSent int64                            `json:"volumeSnapshotsSent,omitempty"`
	Purged              []string                         `json:"purged,omitempty"`
	Forced              bool                             `json:"forced,omitempty"`
	Skipped             map[string]backup.ExpectedPlugin `json:"skipped,omitempty"`
	// WaitingFor says what holds a backup whose result is "waiting": its
	// items are settled, its cascade is not done.
	WaitingFor []string `json:"waitingFor,omitempty"`
	// Warnings name the plugins that received the backup's items
	// although they were not installed when it was registered, and the
	// binaries the plugin lock file does not list.
	Warnings []string `json:"warnings,omitempty"`
	// Error is set, in a list, for a backup whose deletion failed.
	Error string `json:"error,omitempty"`
}

// NewDeletionReport is r's view.
func NewDeletionReport(r *deletion.Report) *DeletionReport {
	v := &DeletionReport{
		Kind: DeletionReportKind, Backup: r.Backup, Result: r.Result, TotalItems: r.TotalItems,
		Counts: r.Counts, Unsettled: r.Unsettled, UnsettledCount: r.UnsettledCount, NotSent: r.NotSent,
		TarballProblem: r.TarballProblem, Purged: r.Purged, Forced: r.Forced, Skipped: r.Skipped,
		VolumeSnapshotsSent: r.SnapshotsSent,
		WaitingFor:          r.WaitingFor,
		Warnings:            r.Warnings,
	}
	if !r.DueAt.IsZero() {
		due := r.DueAt
		v.DueAt = &due
	}
	return v
}

// DeletionPlan is a plan with its kind.
type DeletionPlan struct {
	Kind string `json:"kind"`
	*deletion.Plan
	// Cascade is what the backup's deletion does to its dependents and
	// referrers (the garbage collector's plan), when it has any.
	Cascade *gc.Plan `json:"cascade,omitempty"`
}

// ExplanationKind is the kind of lethe explain -o json (a gc.Explanation).
const ExplanationKind = "Explanation"
