//go:build !unix

package blobstore

import "os"

// fileInode is zero where the platform reports no inode: the modification
// time alone identifies a file.
func fileInode(os.FileInfo) uint64 { return 0 }
