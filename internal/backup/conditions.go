package backup

// Condition types the deletion pipeline sets on a backup.
const (
	// ConditionTarballMissing is True while the backup's tarball is gone
	// from its storage location: no plugin can run, and the daemon stops
	// retrying the deletion until an operator acts (delete it again once
	// the tarball is back, or abandon it).
	ConditionTarballMissing = "TarballMissing"
	// ConditionTarballReplaced is True while the object at the backup's
	// storage key is not the tarball registered (its sha256 differs from
	// the recorded digest): its items are not this backup's, so none is
	// given to a plugin.
	ConditionTarballReplaced = "TarballReplaced"
)

// ParksDeletion reports whether a True condition of type t stops the
// daemon from retrying the backup's deletion on its own.
func ParksDeletion(t string) bool {
	return t == ConditionTarballMissing || t == ConditionTarballReplaced
}
