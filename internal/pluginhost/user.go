package pluginhost

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// pluginUser is the user plugin processes run as (Config.PluginUser).
type pluginUser struct {
	name    string
	uid     uint32
	gid     uint32
	groups  []uint32
	homeDir string
}

// lookupPluginUser resolves a user name or uid. It refuses root, and
// refuses when Lethe cannot switch users (it is not root).
func lookupPluginUser(s string) (*pluginUser, error) {
	u, err := user.Lookup(s)
	if _, isNum := strconv.Atoi(s); err != nil && isNum == nil {
		u, err = user.LookupId(s)
	}
	if err != nil {
		return nil, fmt.Errorf("plugin user %q: no such user", s)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("plugin user %q: uid %q or gid %q is not a number", s, u.Uid, u.Gid)
	}
	if uid == 0 {
		return nil, fmt.Errorf("plugin user %q is root: choose a user of its own for the plugins", s)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("plugin user %q: running plugins as another user needs Lethe to run as root (it switches users, and reaches the sockets that user's plugins create)", s)
	}
	pu := &pluginUser{name: u.Username, uid: uint32(uid), gid: uint32(gid), homeDir: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				pu.groups = append(pu.groups, uint32(g))
			}
		}
	}
	return pu, nil
}

// home is the user's home folder, "" for a nil user.
func (u *pluginUser) home() string {
	if u == nil {
		return ""
	}
	return u.homeDir
}

// credential is what the plugin process runs as; nil for a nil user (the
// plugin runs as Lethe's user). Groups are always set, so that none of
// Lethe's supplementary groups carries over.
func (u *pluginUser) credential() *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: append([]uint32{}, u.groups...)}
}

// socketRoot opens the host's socket folder to the plugin user: others
// may pass through it (0711), not list it. Each plugin process gets a
// folder of its own inside, owned by the user, mode 0700 (address.go):
// only that user and root can reach the sockets in it.
func (u *pluginUser) socketRoot(root string) error {
	if err := os.Chmod(root, 0o711); err != nil { //nolint:gosec // x only: the plugin user may pass through, not list it
		return fmt.Errorf("plugin socket directory: %w", err)
	}
	return nil
}
