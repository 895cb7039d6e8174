package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// sockFolder is the socket folder Lethe makes for one plugin process, the
// only place the address in that process's handshake line may point to.
//
// A plugin names its address in the go-plugin handshake line, and go-plugin
// would dial whatever it names: a TCP address, or any Unix socket on the
// machine, with Lethe's privileges (a confused deputy: a plugin running as
// --plugin-user could make root Lethe connect to any socket). So:
//
//   - accept refuses anything but a Unix socket directly inside this folder
//     (no TCP, no other folder, no "..", no symlink);
//   - the gRPC connection goes through dial, never through go-plugin's own
//     dialer: it opens the accepted name relative to the folder's
//     descriptor without following a symlink, checks that it is a socket,
//     and connects to that exact inode (/proc/self/fd/N), so that neither a
//     renamed folder nor a socket swapped for a symlink after the check
//     can redirect it.
type sockFolder struct {
	path string
	dir  *os.File // O_PATH descriptor of the folder Lethe made

	mu   sync.Mutex
	name string // the socket's file name, once accepted
}

// newSockFolder makes a fresh socket folder for one plugin process inside
// the host's socket folder: mode 0700, owned by the plugin user when
// plugins run as another user.
func (h *Host) newSockFolder() (*sockFolder, error) {
	path := filepath.Join(h.socketDir, "plugin-"+strconv.FormatUint(h.sockSeq.Add(1), 10))
	if err := os.Mkdir(path, 0o700); err != nil {
		return nil, fmt.Errorf("plugin socket folder: %w", err)
	}
	if h.user != nil {
		if err := os.Chown(path, int(h.user.uid), int(h.user.gid)); err != nil {
			_ = os.Remove(path)
			return nil, fmt.Errorf("plugin socket folder: %w", err)
		}
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("plugin socket folder %s: %w", path, err)
	}
	return &sockFolder{path: path, dir: os.NewFile(uintptr(fd), path)}, nil
}

// errAddress is the reason accept gives: the caller names the binary.
var errAddress = errors.New("only a Unix socket in the socket folder Lethe made for this plugin is accepted")

// accept checks the address a plugin's handshake line names, and records
// it for dial. It returns an error of one line that quotes the address.
func (f *sockFolder) accept(addr net.Addr) error {
	if addr == nil {
		return errors.New("its handshake names no address")
	}
	network, path := addr.Network(), addr.String()
	refuse := func(why string) error {
		return fmt.Errorf("its handshake names the address %s %s%s; refusing it: %w (%s)", Quote(network), Quote(path), why, errAddress, Quote(f.path))
	}
	if network != "unix" {
		return refuse("")
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || filepath.Dir(path) != f.path {
		return refuse("")
	}
	name := filepath.Base(path)
	fd, err := f.open(name)
	if err != nil {
		return refuse(": " + err.Error())
	}
	_ = unix.Close(fd)
	f.mu.Lock()
	f.name = name
	f.mu.Unlock()
	return nil
}

// open opens name in the folder, without following a symlink, and checks
// that it is a socket.
func (f *sockFolder) open(name string) (int, error) {
	fd, err := unix.Openat(int(f.dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		_ = unix.Close(fd)
		return -1, errors.New("not a socket")
	}
	return fd, nil
}

// dial connects to the accepted socket. It is the gRPC dialer of every
// plugin connection (it replaces go-plugin's, which dials the handshake's
// address as written), so nothing connects before accept, and nothing
// connects anywhere else.
func (f *sockFolder) dial(ctx context.Context, _ string) (net.Conn, error) {
	f.mu.Lock()
	name := f.name
	f.mu.Unlock()
	if name == "" {
		return nil, errors.New("pluginhost: the plugin's address was not accepted")
	}
	fd, err := f.open(name)
	if err != nil {
		return nil, fmt.Errorf("plugin socket %s: %w", Quote(filepath.Join(f.path, name)), err)
	}
	defer unix.Close(fd)
	var d net.Dialer
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}

// remove closes the folder and removes it with what is left in it.
func (f *sockFolder) remove() {
	if f == nil {
		return
	}
	_ = f.dir.Close()
	_ = os.RemoveAll(f.path)
}
