// Package registry registers backups: `lethe backup create` (a tarball
// from a file) and `lethe backup sync` (tarballs found in storage). It
// validates the input, stores the tarball, and records the backup in the
// catalog with what its deletion will need: the digest and item counts,
// the storage location, and the expected plugins (which installed plugins
// select how many items), computed in the one pass that validates the
// tarball.
//
// It depends on the catalog, blobstore, archive and pluginhost
// interfaces, never on the CLI; the CLI, the server and tests share it.
// It never deletes a backup, and sync never re-imports one that is
// pending deletion or purged.
package registry
