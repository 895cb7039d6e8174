// Package blobstore owns where backup tarballs live. Open turns a storage URL
// into a Store:
//
//	file:///abs/dir
//	s3://bucket/optional/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true
//
// s3:// goes through gocloud.dev/blob's s3blob (wired explicitly; no
// blank-import URL registries); file:// is files beneath the folder,
// reached through os.Root, never through a symbolic link, and only regular
// files are objects (ErrNotRegular otherwise). Puts are atomic, reads stream, and a missing
// key is ErrNotFound on every backend.
//
// Locations holds the configured store and opens, on demand, the other
// locations that records name (Location compares two URLs by the place
// they name, credentials aside); a location that is gone or unreachable is
// an *UnavailableError that names it without secrets.
//
// The package must not know about backups, tarball contents, plugins or the
// catalog: it moves opaque bytes under "/"-separated keys. The conformance
// suite every backend must pass lives in blobstoretest; s3test starts a real
// S3-compatible server (versitygw) for tests.
package blobstore
