package deletion

import (
	"fmt"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/termtext"
)

// UnfinishedError refuses the deletion of a backup that Velero has not
// finished writing (its velero-backup.json, as the last sync read it,
// says New, InProgress, WaitingForPluginOperations, Finalizing, …):
// Velero's controller refuses it too ("backup is still in progress").
// Nothing changed; a later sync that reads a finished phase lifts it.
type UnfinishedError struct {
	Backup string
	Phase  string
}

func (e *UnfinishedError) Error() string {
	phase := termtext.Quote(e.Phase) // read back from the catalog: trust nothing
	if phase == "" {
		phase = "(no phase yet)"
	}
	return fmt.Sprintf("backup %s is still being written by Velero (phase %s): only a Completed, PartiallyFailed, Failed or FailedValidation backup can be deleted; "+
		"nothing changed (run `lethe backup sync` once Velero has finished it)", e.Backup, phase)
}

// checkFinished refuses a request on, or a run of, a backup Velero has
// not finished. A backup deleted by hand or by TTL was finished when its
// deletion started (phases only move forward); one that a cascade moved
// to Deleting while Velero still wrote it waits here, nothing sent to any
// plugin, until a sync reads a finished phase.
func checkFinished(b *backup.Backup) error {
	if phase, unfinished := b.Unfinished(); unfinished {
		return &UnfinishedError{Backup: b.Name(), Phase: phase}
	}
	return nil
}
