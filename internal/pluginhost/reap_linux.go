package pluginhost

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// This file keeps plugins from leaving processes behind when no cgroup of
// their own is available (cgroup_linux.go covers the case where one is).
//
// Lethe is a child subreaper (PR_SET_CHILD_SUBREAPER): a process that a
// plugin started and that lost its parent (a double fork, a daemon that
// called setsid) is re-parented to Lethe rather than to init. The SDK's
// Serve is a subreaper too, so while an SDK plugin lives its descendants
// stay below it; they come to Lethe when it ends. When a plugin process
// has ended, sweep kills what is left of it:
//
//   - every process of its process group (it runs in a group of its own);
//   - every process re-parented to Lethe that is in a session other than
//     Lethe's (it, or an ancestor, called setsid) and is not a plugin
//     process Lethe started;
//   - the descendants of both, round after round, until none is left;
//
// and reaps those of them that become Lethe's zombies.
//
// It never waits for a process that os/exec waits for: plugin processes
// are registered from their start until go-plugin has waited for them,
// and everything else Lethe starts stays in Lethe's session. Without a
// cgroup, Lethe cannot tell which plugin a re-parented daemon came from:
// it ends all of them whenever a plugin process ends.

// procReaper is process-wide, as the subreaper attribute is.
type procReaper struct {
	once      sync.Once
	subreaper bool
	sid       int

	mu      sync.Mutex
	plugins map[int]bool // plugin processes go-plugin waits for
}

var reaper = &procReaper{plugins: map[int]bool{}}

// enable makes Lethe a child subreaper, once per process.
func (r *procReaper) enable(log hclog.Logger) {
	r.once.Do(func() {
		r.sid, _ = unix.Getsid(0)
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			log.Warn("cannot become a child subreaper; a plugin's daemonised descendants may outlive it", "error", err)
			return
		}
		r.subreaper = true
	})
}

func (r *procReaper) register(pid int) {
	r.mu.Lock()
	r.plugins[pid] = true
	r.mu.Unlock()
}

func (r *procReaper) unregister(pid int) {
	r.mu.Lock()
	delete(r.plugins, pid)
	r.mu.Unlock()
}

func (r *procReaper) isPlugin(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plugins[pid]
}

// procEntry is one process as /proc/PID/stat shows it.
type procEntry struct {
	pid, ppid, pgid, sid int
	state                byte
}

// readProc parses /proc/pid/stat: "pid (comm) state ppid pgrp session ...".
func readProc(pid int) (procEntry, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procEntry{}, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return procEntry{}, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 4 || f[0] == "" {
		return procEntry{}, false
	}
	e := procEntry{pid: pid, state: f[0][0]}
	var err1, err2, err3 error
	e.ppid, err1 = strconv.Atoi(f[1])
	e.pgid, err2 = strconv.Atoi(f[2])
	e.sid, err3 = strconv.Atoi(f[3])
	return e, err1 == nil && err2 == nil && err3 == nil
}

// readProcs lists every process.
func readProcs() []procEntry {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procEntry, 0, len(dir))
	for _, d := range dir {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if e, ok := readProc(pid); ok {
			out = append(out, e)
		}
	}
	return out
}

// adopted reports whether e is a process re-parented to Lethe from a
// plugin: Lethe's child, not a plugin process, and either in the plugin's
// process group or in a session of its own.
func (r *procReaper) adopted(e procEntry, self, pgid int) bool {
	return e.ppid == self && !r.isPlugin(e.pid) && (e.sid != r.sid || (pgid > 0 && e.pgid == pgid))
}

// sweep kills what is left of the plugin process group pgid (the plugin's
// pid), once its leader has ended, and every daemon re-parented to Lethe;
// see the top of this file. cgroupMembers lists the processes of the
// plugin's cgroup that may become Lethe's zombies (cgroup.kill killed them).
// killOrphans is false when a cgroup did the killing.
func (r *procReaper) sweep(pgid int, killOrphans bool, cgroupMembers []int) {
	self := os.Getpid()
	members := map[int]bool{}
	for _, pid := range cgroupMembers {
		members[pid] = true
	}
	for round := 0; round < 500; round++ {
		procs := readProcs()
		children := map[int][]int{}
		for _, e := range procs {
			children[e.ppid] = append(children[e.ppid], e.pid)
		}
		var kill []int
		seen := map[int]bool{}
		var add func(pid int)
		add = func(pid int) {
			if seen[pid] || pid == self || pid <= 1 || r.isPlugin(pid) {
				return
			}
			seen[pid] = true
			kill = append(kill, pid)
			for _, c := range children[pid] {
				add(c)
			}
		}
		// pending counts Lethe's children of this plugin that were killed
		// and are still to be reaped: zombies, and those not yet zombies
		// (a process leaves its cgroup before it becomes a zombie).
		pending := 0
		for _, e := range procs {
			member := members[e.pid] && e.ppid == self && !r.isPlugin(e.pid)
			mine := member || r.adopted(e, self, pgid)
			if e.state == 'Z' {
				if mine {
					pending++
					var ws unix.WaitStatus
					_, _ = unix.Wait4(e.pid, &ws, unix.WNOHANG, nil)
				}
				continue
			}
			switch {
			case killOrphans && pgid > 0 && e.pgid == pgid:
				add(e.pid)
			case killOrphans && r.adopted(e, self, 0):
				add(e.pid)
			case member || (mine && pgid > 0 && e.pgid == pgid):
				pending++
			}
		}
		if len(kill) == 0 && pending == 0 {
			return
		}
		for _, pid := range kill {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// groupAlive reports whether the process group pgid has a member that is
// not a zombie.
func groupAlive(pgid int) bool {
	if pgid <= 0 || syscall.Kill(-pgid, 0) != nil {
		return false
	}
	for _, e := range readProcs() {
		if e.pgid == pgid && e.state != 'Z' {
			return true
		}
	}
	return false
}
