//go:build unix

package blobstore

import (
	"os"
	"syscall"
)

// fileID is the file's inode and device.
func fileID(fi os.FileInfo) (ino, dev uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino), uint64(st.Dev) //nolint:unconvert // int32 on some platforms
	}
	return 0, 0
}
