// Package deletion is the backup deletion pipeline. It validates a backup's
// tarball, moves the backup through the lifecycle (Active → Scheduled →
// Deleting → Purged), streams the tarball's items through the matching
// DeleteItemAction plugins in alphanumeric order of their names, checkpoints
// progress so that a crash skips nothing, and purges the tarball and the
// record only when every item is done or skipped. The tarball is read from,
// and purged in, the storage location the backup recorded; a tarball that
// is missing, or is not the one registered (its digest), stops the
// deletion before any plugin runs, except on the audited abandon path
// (Options.ForcePurge).
//
// It stands on the catalog, blob storage, archive and plugin host
// interfaces; it does not know the CLI, a database driver or a storage
// backend.
package deletion
