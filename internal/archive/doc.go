// Package archive streams the items of a Velero backup tarball (format 1.x,
// gzip or zstd) and rejects hostile tarballs with one clear error naming the
// offending entry.
//
// It owns the tarball format only: it never writes to disk, never talks to a
// plugin, the catalog or a blob store, and holds no item after yielding it.
// Memory stays flat whatever the tarball's size: bodies are streamed, and the
// only state that grows with the item count is a compact hash set of 16 bytes
// per distinct item (see the Reader's documentation).
package archive
