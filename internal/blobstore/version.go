package blobstore

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrVersionMismatch is returned when the object at a key is not the
// version a caller pinned: it was replaced or rewritten since.
var ErrVersionMismatch = errors.New("blobstore: object changed")

// Version is a stored object's identity, as its storage reports it: a new
// object written at the same key gets a new one, even with the same size.
// On s3:// it is the ETag, and the VersionId where the bucket keeps
// versions; on file:// the modification time in nanoseconds and the
// file's inode (not its device: the device number of a shared (NFS)
// folder differs between the hosts that mount it). The zero Version pins
// nothing.
type Version struct {
	ETag      string `json:"etag,omitempty"`
	VersionID string `json:"versionId,omitempty"`
	ModTimeNs int64  `json:"modTimeNs,omitempty"`
	Inode     uint64 `json:"inode,omitempty"`
}

// IsZero reports whether v records nothing.
func (v Version) IsZero() bool { return v == Version{} }

// Matches reports whether found is the version v recorded: every field v
// records must be equal in found. A field v leaves empty is not compared.
func (v Version) Matches(found Version) bool {
	return (v.ETag == "" || v.ETag == found.ETag) &&
		(v.VersionID == "" || v.VersionID == found.VersionID) &&
		(v.ModTimeNs == 0 || v.ModTimeNs == found.ModTimeNs) &&
		(v.Inode == 0 || v.Inode == found.Inode)
}

// String names the fields v records, for messages.
func (v Version) String() string {
	var parts []string
	if v.ETag != "" {
		parts = append(parts, "etag "+v.ETag)
	}
	if v.VersionID != "" {
		parts = append(parts, "versionId "+v.VersionID)
	}
	if v.ModTimeNs != 0 {
		parts = append(parts, fmt.Sprintf("mtime %dns", v.ModTimeNs))
	}
	if v.Inode != 0 {
		parts = append(parts, fmt.Sprintf("inode %d", v.Inode))
	}
	if len(parts) == 0 {
		return "no version"
	}
	return strings.Join(parts, ", ")
}

// fileVersion is the Version of a file:// object.
func fileVersion(fi os.FileInfo) Version {
	v := Version{ModTimeNs: fi.ModTime().UnixNano()}
	v.Inode = fileInode(fi)
	return v
}

// mismatch is the ErrVersionMismatch error for key.
func mismatch(key string, want, found Version) error {
	return fmt.Errorf("%w: %q is %s, not the pinned %s", ErrVersionMismatch, key, found, want)
}
