package pluginhost

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// testHookSealed, when set by a test, runs after a binary was copied,
// sealed and hashed, before anything runs it.
var testHookSealed func(path string)

// sealedImage copies the executable at path into a sealed memfd, hashes
// the sealed copy, and returns a read-only descriptor of it with its
// sha256. The copy can no longer change (F_SEAL_WRITE, F_SEAL_SHRINK,
// F_SEAL_GROW, F_SEAL_SEAL), so executing it (/proc/self/fd/N) runs
// exactly the bytes that were hashed, whatever happens to path meanwhile.
// A script stays readable by its interpreter the same way.
func sealedImage(path string) (*os.File, string, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer src.Close()
	name := "lethe-plugin:" + filepath.Base(path)
	if len(name) > 200 { // memfd names are at most 249 bytes
		name = name[:200]
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // kernels before 6.3 know no MFD_EXEC
		fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, "", fmt.Errorf("memfd_create: %w", err)
	}
	mem := os.NewFile(uintptr(fd), name)
	defer mem.Close()
	if _, err := io.Copy(mem, src); err != nil {
		return nil, "", fmt.Errorf("copy %s: %w", path, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS,
		unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return nil, "", fmt.Errorf("seal the copy of %s: %w", path, err)
	}
	ro, err := os.Open("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, "", fmt.Errorf("reopen the copy of %s: %w", path, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(ro, 0, 1<<62)); err != nil {
		ro.Close()
		return nil, "", fmt.Errorf("checksum the copy of %s: %w", path, err)
	}
	return ro, hex.EncodeToString(h.Sum(nil)), nil
}

// closeOnExecInherited marks every descriptor above stderr close-on-exec.
// Go opens its own that way, but descriptors Lethe inherited from whatever
// started it (a shell, a supervisor) are not, and would otherwise pass on
// to every plugin. Lethe itself keeps them open.
func closeOnExecInherited() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
