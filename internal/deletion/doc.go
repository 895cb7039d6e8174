// Package deletion is the backup deletion pipeline. It validates a backup's
// tarball, moves the backup through the lifecycle (Active → Scheduled →
// Deleting → Purged), streams the tarball's items through the matching
// DeleteItemAction plugins in alphanumeric order of their names, checkpoints
// progress so that a crash skips nothing, and purges the tarball and the
// record only when every item is done or skipped. The tarball is read from,
// and purged in, the storage location the backup recorded, once per run:
// the pass that feeds the plugins hashes it as it streams and checks the
// registered digest at the end, before anything is purged. A tarball that
// is missing, of another size, or another object than the one registered
// (its storage identity, Spec.StorageVersion: an S3 ETag, a file's mtime
// and inode) stops the deletion before any plugin runs, unless one read
// proves it holds the registered bytes; the pass's read is pinned to that
// identity, so a swap after the check stops it before any item is sent.
// For a backup registered before the identity was recorded, a same-size
// tarball whose digest differs stops it at the end of the pass, with the
// run's progress rewound so that no item is skipped. The audited abandon path (Options.ForcePurge) purges
// either without plugins.
//
// It stands on the catalog, blob storage, archive and plugin host
// interfaces; it does not know the CLI, a database driver or a storage
// backend.
package deletion
