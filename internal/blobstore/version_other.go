//go:build !unix

package blobstore

import "os"

// fileID is zero where the platform reports no inode: the modification
// time alone identifies a file.
func fileID(os.FileInfo) (ino, dev uint64) { return 0, 0 }
