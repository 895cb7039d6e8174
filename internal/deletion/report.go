package deletion

import (
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// Progress is a snapshot of a running deletion.
type Progress struct {
	Processed int64
	Total     int64
}

// Result says how a deletion request ended.
type Result string

// The results of Delete.
const (
	ResultScheduled  Result = "scheduled"  // in the grace window
	ResultQueued     Result = "queued"     // Deleting, left to the daemon
	ResultPurged     Result = "purged"     // gone
	ResultIncomplete Result = "incomplete" // some items failed or are blocked
	// ResultNotScheduled: OnlyIfScheduled was set and the backup is not
	// Scheduled (it was undeleted); nothing changed.
	ResultNotScheduled Result = "not-scheduled"
	// ResultWaiting: every item is settled, but the backup is not purged
	// yet: its cascade holds it (dependents with blockOwnerDeletion under
	// Foreground, block referrers, or finalizers; Report.WaitingFor). The
	// garbage collector purges it once they are gone.
	ResultWaiting Result = "waiting"
)

// Report is the outcome of a deletion request.
type Report struct {
	Backup string
	Result Result
	DueAt  time.Time
	// TotalItems is the number of unique items in the tarball.
	TotalItems int64
	// Counts are the settled outcomes by plugin.
	Counts map[string]catalog.OutcomeCount
	// Unsettled are the failed and blocked items (at most 20).
	Unsettled []catalog.ItemOutcome
	// UnsettledCount counts every item not settled as done or skipped:
	// the failed and blocked ones, plus, when the tarball is gone or
	// replaced, NotSent.
	UnsettledCount int
	// NotSent counts the items that never reached a plugin because the
	// tarball was missing or replaced (a forced purge only).
	NotSent int64
	// TarballProblem says why no plugin could run on a forced purge:
	// the tarball is missing or replaced. Empty otherwise.
	TarballProblem string
	// SnapshotsProblem says why the native volume snapshots the backup
	// recorded were abandoned on a forced purge (their list is unusable;
	// they count in NotSent). Empty otherwise.
	SnapshotsProblem string `json:",omitempty"`
	// SnapshotsSent counts the native volume snapshots sent to their
	// plugins on a forced purge whose tarball is missing or replaced:
	// their list is a file of its own, so they still reach their
	// plugins, and only those not settled are abandoned.
	SnapshotsSent int64 `json:",omitempty"`
	// Purged lists what was purged, e.g. the tarball's URL and the record.
	Purged []string
	// Forced is set when the backup was purged with items unsettled
	// (Options.ForcePurge).
	Forced bool
	// Skipped are the plugins skipped by Options.SkipPlugins, with the
	// items each would have received.
	Skipped map[string]backup.ExpectedPlugin `json:",omitempty"`
	// WaitingFor says what holds a ResultWaiting backup in Deleting.
	WaitingFor []string `json:",omitempty"`
	// Warnings name the plugins that received the backup's items although
	// they were not installed when it was registered, and the binaries
	// the plugin lock file does not list (they received none).
	Warnings []string `json:",omitempty"`
}
