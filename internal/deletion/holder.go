package deletion

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/lethehq/lethe/internal/catalog"
)

// defaultHolder names this process in leases: "<host> pid <pid>", with
// " ns <inode>" of its PID namespace where Linux says, since containers
// with host networking share a hostname but not their PIDs.
func defaultHolder() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	h := fmt.Sprintf("%s pid %d", host, os.Getpid())
	if ns := pidNamespace(); ns != "" {
		h += " ns " + ns
	}
	return h
}

// pidNamespace is the inode of this process's PID namespace, or "".
func pidNamespace() string {
	link, err := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	if err != nil {
		return ""
	}
	ino := strings.TrimSuffix(strings.TrimPrefix(link, "pid:["), "]")
	if _, err := strconv.ParseUint(ino, 10, 64); err != nil {
		return ""
	}
	return ino
}

// deadLocalHolder reports whether a lease holder named by defaultHolder is
// a process of this host and PID namespace that no longer exists. A live
// process, one of another host or namespace, or a name in another form is
// never taken for dead.
func deadLocalHolder(holder string) bool {
	host, rest, ok := strings.Cut(holder, " pid ")
	if !ok {
		return false
	}
	me, _ := os.Hostname()
	if host != me {
		return false
	}
	pidText, ns, hasNS := strings.Cut(rest, " ns ")
	if mine := pidNamespace(); !hasNS || mine == "" || ns != mine {
		return false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return errors.Is(err, syscall.ESRCH)
	}
	// A killed process its parent has not reaped yet is a zombie: dead.
	stat, err := os.ReadFile("/proc/" + pidText + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// claim takes the deletion's lease. A lease left by a process of this host
// that died (SIGKILL, power loss of a container) is taken over at once
// instead of after its expiry.
func (d *Deleter) claim(ctx context.Context, uid string) (*catalog.WorkItem, error) {
	w, err := d.cfg.Store.ClaimKey(ctx, Queue, uid, d.cfg.Holder, d.cfg.LeaseTTL)
	var held *catalog.LeaseHeldError
	if !errors.As(err, &held) || !deadLocalHolder(held.Holder) {
		if err == nil {
			d.tookOver(w)
		}
		return w, err
	}
	cur, gerr := d.cfg.Store.GetWork(ctx, Queue, uid)
	if gerr != nil {
		return nil, err
	}
	d.log.Info("taking over the lease of a dead process", "holder", held.Holder)
	if cur.Holder != held.Holder {
		return nil, err
	}
	if rerr := d.cfg.Store.Release(ctx, cur.Fence(), d.now(), "holder "+held.Holder+" died"); rerr != nil && !errors.Is(rerr, catalog.ErrLeaseLost) {
		return nil, rerr
	}
	w, err = d.cfg.Store.ClaimKey(ctx, Queue, uid, d.cfg.Holder, d.cfg.LeaseTTL)
	if err == nil {
		w.TakenOverFrom = held.Holder
		d.tookOver(w)
	}
	return w, err
}
