package pluginhost

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Where the cgroup v2 hierarchy is writable by Lethe (its own cgroup, as
// systemd's Delegate=yes makes it), each plugin process starts in a cgroup
// of its own, a child of Lethe's: "lethe-<host pid>-plugin-<n>". It is put
// there by the kernel as it is created (clone3 CLONE_INTO_CGROUP), so
// nothing it starts is ever outside, and a process of another user (the
// --plugin-user) cannot move itself out. When the plugin ends, cgroup.kill
// SIGKILLs everything in it at once, whatever its session or parent, and
// the cgroup is removed. A host that was killed leaves its cgroups; the
// next host kills and removes those of dead hosts.

// cgroupDir returns Lethe's own cgroup v2 folder, or why there is none:
// a cgroup v1 system, a hierarchy mounted read-only or not writable by
// Lethe's user (systemd's ProtectControlGroups, a container).
func cgroupDir() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var rel string
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = p, true
		}
	}
	if !found {
		return "", errors.New("no cgroup v2 hierarchy (/proc/self/cgroup has no 0:: line)")
	}
	mount, root, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(rel, root)
	if !ok {
		return "", fmt.Errorf("the cgroup of lethe, %s, is outside the mounted cgroup2 hierarchy %s", rel, root)
	}
	dir := filepath.Join(mount, rel)
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return "", fmt.Errorf("%s is not writable: %w", dir, err)
	}
	return dir, nil
}

// cgroup2Mount finds the cgroup2 file system in /proc/self/mountinfo: its
// mount point, and the folder of the hierarchy mounted there.
func cgroup2Mount() (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		if strings.Contains(","+fields[5]+",", ",ro,") {
			return "", "", fmt.Errorf("cgroup2 is mounted read-only at %s", fields[4])
		}
		return unescapeMount(fields[4]), unescapeMount(fields[3]), nil
	}
	return "", "", errors.New("no cgroup2 file system is mounted")
}

// unescapeMount undoes the octal escapes of mountinfo (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func cgroupPrefix(pid int) string { return "lethe-" + strconv.Itoa(pid) + "-plugin-" }

// pluginCgroup is the cgroup of one plugin process.
type pluginCgroup struct {
	path string
	fd   int // open until the process started in it
}

// newCgroup makes the cgroup of one plugin process; nil when cgroups are
// off or unavailable.
func (h *Host) newCgroup() *pluginCgroup {
	h.cgroupMu.Lock()
	dir := h.cgroupDir
	h.cgroupMu.Unlock()
	if dir == "" {
		return nil
	}
	path := filepath.Join(dir, cgroupPrefix(os.Getpid())+strconv.FormatUint(h.cgroupSeq.Add(1), 10))
	if err := os.Mkdir(path, 0o755); err != nil { //nolint:gosec // a cgroup folder: the kernel sets its files' modes, and the plugin user must reach cgroup.procs
		h.cgroupsOff("cannot make a plugin cgroup", err)
		return nil
	}
	if _, err := os.Stat(filepath.Join(path, "cgroup.kill")); err != nil {
		_ = os.Remove(path)
		h.cgroupsOff("this kernel's cgroups have no cgroup.kill (Linux 5.14 or later)", err)
		return nil
	}
	fd, err := unix.Open(path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(path)
		h.cgroupsOff("cannot open a plugin cgroup", err)
		return nil
	}
	return &pluginCgroup{path: path, fd: fd}
}

// cgroupsOff stops using cgroups for this host, with a debug line: the
// subreaper's sweep still ends what plugins leave (reap_linux.go).
func (h *Host) cgroupsOff(why string, err error) {
	h.cgroupMu.Lock()
	defer h.cgroupMu.Unlock()
	if h.cgroupDir != "" {
		h.logger.Debug("plugins run without a cgroup of their own: "+why, "error", err)
		h.cgroupDir = ""
	}
}

// started closes the descriptor the process was created with.
func (c *pluginCgroup) started() {
	if c != nil && c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
}

// members lists the processes in the cgroup.
func (c *pluginCgroup) members() []int {
	data, err := os.ReadFile(filepath.Join(c.path, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// kill SIGKILLs every process in the cgroup, and returns those that were.
func (c *pluginCgroup) kill() []int {
	if c == nil {
		return nil
	}
	members := c.members()
	_ = os.WriteFile(filepath.Join(c.path, "cgroup.kill"), []byte("1"), 0)
	return members
}

// populated reports whether a process is left in the cgroup.
func (c *pluginCgroup) populated() bool {
	data, err := os.ReadFile(filepath.Join(c.path, "cgroup.events"))
	if err != nil {
		return false
	}
	return strings.Contains(string(data), "populated 1")
}

// wait waits, up to timeout, until no process is left in the cgroup (a
// killed process leaves it as it exits, before it is reaped).
func (c *pluginCgroup) wait(timeout time.Duration) {
	if c == nil {
		return
	}
	for deadline := time.Now().Add(timeout); c.populated() && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
}

// remove waits (up to timeout) for the cgroup to be empty, then removes it.
func (c *pluginCgroup) remove(timeout time.Duration) {
	if c == nil {
		return
	}
	c.started()
	c.wait(timeout)
	_ = os.Remove(c.path)
}

// sweepCgroups kills and removes the plugin cgroups that hosts killed
// without a chance to clean up left in dir.
func sweepCgroups(dir string, log hclog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "lethe-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, seq, ok := strings.Cut(rest, "-plugin-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() || seq == "" {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive, or not ours to judge
		}
		c := &pluginCgroup{path: filepath.Join(dir, e.Name()), fd: -1}
		members := c.kill()
		if len(members) > 0 {
			log.Warn("killed the processes a dead host's plugin left", "cgroup", c.path, "processes", len(members))
		}
		c.remove(5 * time.Second)
		reaper.sweep(0, false, members) // those re-parented to this process
	}
}
