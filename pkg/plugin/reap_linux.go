package plugin

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// becomeSubreaper makes the process a child subreaper: its descendants
// that lose their parent (a double fork, a daemon) are re-parented to it
// rather than to init, so that killDescendants still finds them.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// descendants returns the live descendants of pid, from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, ok := procStat(p)
		if !ok || state == 'Z' {
			continue
		}
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// procStat reads the parent and state of pid from /proc/pid/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, 0, false
	}
	fields := strings.Fields(s[i+2:]) // state ppid ...
	if len(fields) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return ppid, fields[0][0], err == nil
}

// killDescendants ends every descendant of this process: SIGTERM, then,
// after up to grace, SIGKILL, round after round until none is left (a
// killed parent's children are re-parented to this process, a subreaper).
// It writes nothing: it may run after the host died, when stderr is a
// broken pipe.
func killDescendants(grace time.Duration) {
	self := os.Getpid()
	pids := descendants(self)
	if len(pids) == 0 {
		return
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for len(descendants(self)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for range 100 {
		pids = descendants(self)
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reapOrphans reaps, every interval, the zombie children that were already
// zombies at the previous pass: descendants re-parented to this subreaper
// that nobody waits for. A child the plugin started with os/exec is waited
// for by its Cmd as soon as it exits, so it is never a zombie that long.
func reapOrphans(interval time.Duration, stop <-chan struct{}) {
	self := os.Getpid()
	seen := map[int]bool{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		entries, err := os.ReadDir("/proc")
		if err != nil {
			continue
		}
		next := map[int]bool{}
		for _, e := range entries {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if ppid, state, ok := procStat(p); !ok || ppid != self || state != 'Z' {
				continue
			}
			if seen[p] {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(p, &ws, syscall.WNOHANG, nil)
				continue
			}
			next[p] = true
		}
		seen = next
	}
}

// groupAlive reports whether the process group pgid has a member that is
// not a zombie.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state ppid pgrp ...
		if len(f) >= 3 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) && p > 0 {
			return true
		}
	}
	return false
}
