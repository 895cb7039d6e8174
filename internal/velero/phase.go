package velero

import "slices"

// Velero's backup phases (status.phase), as pkg/apis/velero/v1/
// backup_types.go names them.
const (
	PhaseNew                                       = "New"
	PhaseQueued                                    = "Queued"
	PhaseReadyToStart                              = "ReadyToStart"
	PhaseInProgress                                = "InProgress"
	PhaseWaitingForPluginOperations                = "WaitingForPluginOperations"
	PhaseWaitingForPluginOperationsPartiallyFailed = "WaitingForPluginOperationsPartiallyFailed"
	PhaseFinalizing                                = "Finalizing"
	PhaseFinalizingPartiallyFailed                 = "FinalizingPartiallyFailed"
	PhaseCompleted                                 = "Completed"
	PhasePartiallyFailed                           = "PartiallyFailed"
	PhaseFailed                                    = "Failed"
	PhaseFailedValidation                          = "FailedValidation"
	// PhaseDeleting is the phase Velero's deletion controller sets before
	// it runs the DeleteItemAction plugins; the Backup they receive
	// carries it.
	PhaseDeleting = "Deleting"
)

// finishedPhases are the phases in which Velero has stopped writing a
// backup: the only ones Velero's own deletion and garbage collection
// treat as done, and the only ones Lethe deletes.
var finishedPhases = []string{PhaseCompleted, PhasePartiallyFailed, PhaseFailed, PhaseFailedValidation}

// Finished reports whether a backup in phase (status.phase of its
// velero-backup.json) is finished. Every other value is not: New, Queued,
// ReadyToStart, InProgress, WaitingForPluginOperations(PartiallyFailed),
// Finalizing(PartiallyFailed), an empty phase (Velero has not even
// started it) and a phase Lethe does not know.
func Finished(phase string) bool { return slices.Contains(finishedPhases, phase) }
