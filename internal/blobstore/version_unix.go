//go:build unix

package blobstore

import (
	"os"
	"syscall"
)

// fileInode is the file's inode number.
func fileInode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino) //nolint:unconvert // not uint64 on every platform
	}
	return 0
}
