package cli

import "github.com/lethehq/lethe/internal/view"

// The objects -o json|yaml prints live in internal/view, which the API
// serves too: one schema. These names keep the CLI's code short.
type (
	object       = view.Object
	objectList   = view.List
	resourceView = view.Resource
	backupObject = view.BackupObject
	backupView   = view.Backup
	keyView      = view.Key
	reportView   = view.DeletionReport
	planView     = view.DeletionPlan
	locationView = view.Location
)

// AuditEntryKind is the kind of an audit entry's JSON.
const (
	AuditEntryKind     = view.AuditEntryKind
	kindRetryItem      = view.RetryItemKind
	kindDeletionReport = view.DeletionReportKind
	kindDeletionPlan   = view.DeletionPlanKind
	kindLocationStatus = view.LocationStatusKind
	kindExplanation    = view.ExplanationKind
)

var (
	toObject        = view.ToObject
	toObjects       = view.ToObjects
	newResourceView = view.NewResource
	backupObjects   = view.BackupObjects
	auditViews      = view.AuditEntries
	retryItem       = view.NewRetryItem
	retryItems      = view.RetryItems
	newReportView   = view.NewDeletionReport
)
