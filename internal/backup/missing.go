package backup

// ConditionMissingFromStorage is True while the backup's tarball is not in
// the listing of its storage location, a location that answered: its
// backups/<name>/ folder disappeared behind Lethe's back (removed by
// hand, by a bucket lifecycle rule, by Velero). It is set and cleared by
// sync, never from a listing that failed (unknown is not absent), and
// the backup leaves the catalog only through the explicit, audited
// `lethe backup sync --prune-missing`.
const ConditionMissingFromStorage = "MissingFromStorage"
