package pluginhost

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

// environ reads /proc/<pid>/environ: what the process was started with,
// whatever it did to its environment since.
func environ(t *testing.T, pid int) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	require.NoError(t, err)
	out := map[string][]string{}
	for _, kv := range strings.Split(string(data), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = append(out[k], v)
		}
	}
	return out
}

// TestPluginEnvironmentIsMinimal: a spy plugin's environment holds none of
// Lethe's credentials unless configured for it, and Lethe's own variables
// cannot be overridden from the inherited environment.
func TestPluginEnvironmentIsMinimal(t *testing.T) {
	secrets := map[string]string{
		"AWS_SECRET_ACCESS_KEY": "aws-secret", "AWS_ACCESS_KEY_ID": "aws-id",
		"PGPASSWORD": "pg-secret", "PGHOST": "db.internal",
		"LETHE_STORE": "postgres://lethe:pw@db/lethe", "LETHE_STORAGE": "s3://bucket?secret=1",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("PLUGIN_UNIX_SOCKET_DIR", "/evil")
	t.Setenv(plugin.MTLSFDEnv, "0")
	t.Setenv("LANG", "C.UTF-8")
	dir := pluginDir(t)
	addScript(t, dir, "spy", "-names=example.com/spy")
	addScript(t, dir, "configured", "-names=example.com/configured")
	h := newHost(t, &Config{Dir: dir, PluginEnv: map[string]map[string]string{
		"configured": {"LETHE_STORE": "sqlite:///for/this/plugin", "AWS_REGION": "eu-west-1"},
	}})

	spy := environ(t, currentPID(t, h, "example.com/spy"))
	for k := range spy {
		require.False(t, strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "PG") || k == "LETHE_STORE" || k == "LETHE_STORAGE",
			"%s reached a plugin it was not configured for", k)
	}
	require.Equal(t, []string{"C.UTF-8"}, spy["LANG"], "allowlisted variables pass")
	require.Len(t, spy["PLUGIN_UNIX_SOCKET_DIR"], 1, "Lethe's own variable, once")
	require.Equal(t, h.socketDir, filepath.Dir(spy["PLUGIN_UNIX_SOCKET_DIR"][0]), "a folder of its own in the host's socket folder")
	require.Equal(t, []string{"3"}, spy[plugin.MTLSFDEnv], "Lethe's own variable, not the inherited one")
	require.NotEmpty(t, spy["PATH"])

	conf := environ(t, currentPID(t, h, "example.com/configured"))
	require.Equal(t, []string{"sqlite:///for/this/plugin"}, conf["LETHE_STORE"])
	require.Equal(t, []string{"eu-west-1"}, conf["AWS_REGION"])
	for k := range conf {
		if k != "AWS_REGION" && k != "LETHE_STORE" {
			require.False(t, strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "PG") || k == "LETHE_STORAGE", "%s leaked", k)
		}
	}
	require.Len(t, conf["PLUGIN_UNIX_SOCKET_DIR"], 1)
	require.Equal(t, h.socketDir, filepath.Dir(conf["PLUGIN_UNIX_SOCKET_DIR"][0]))
	require.NotEqual(t, spy["PLUGIN_UNIX_SOCKET_DIR"], conf["PLUGIN_UNIX_SOCKET_DIR"], "each plugin process has a socket folder of its own")
}

func TestPluginEnvironmentValidation(t *testing.T) {
	dir := pluginDir(t)
	addBinary(t, dir, "noop")
	for _, tc := range []struct {
		env  map[string]map[string]string
		want string
	}{
		{map[string]map[string]string{"nope": {"A": "1"}}, `plugin environment for "nope": no plugin binary of that name in ` + dir + " (binaries: noop)"},
		{map[string]map[string]string{"lethe.io/noop": {"A": "1"}}, "name the binary file (noop), not a plugin it serves"},
		{map[string]map[string]string{"noop": {"1A": "1"}}, `"1A" is not a valid variable name`},
		{map[string]map[string]string{"noop": {"PLUGIN_UNIX_SOCKET_DIR": "/x"}}, "PLUGIN_UNIX_SOCKET_DIR is set by Lethe itself"},
		{map[string]map[string]string{"noop": {plugin.MTLSFDEnv: "3"}}, plugin.MTLSFDEnv + " is set by Lethe itself"},
		{map[string]map[string]string{"noop": {"LETHE_PLUGIN": "x"}}, "LETHE_PLUGIN is set by Lethe itself"},
	} {
		_, err := New(&Config{Dir: dir, PluginEnv: tc.env})
		require.Error(t, err)
		require.Contains(t, err.Error(), tc.want)
		require.NotContains(t, err.Error(), "\n")
	}
	h := newHost(t, &Config{Dir: dir, PluginEnv: map[string]map[string]string{"noop": {plugin.LogLevelEnv: "debug"}}})
	require.Equal(t, []string{"debug"}, environ(t, currentPID(t, h, "noop"))[plugin.LogLevelEnv])
}

// TestMTLSKeyNeverInAnEnvironment: the plugin's private key is in neither
// the plugin's /proc/<pid>/environ nor its child's.
func TestMTLSKeyNeverInAnEnvironment(t *testing.T) {
	dir := pluginDir(t)
	state := t.TempDir()
	addScript(t, dir, "test", "-names=example.com/test", "-state="+state)
	h := newHost(t, &Config{Dir: dir})
	pid := currentPID(t, h, "example.com/test")
	got := run(t, h, "example.com/test", SessionOptions{}, "spawn")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	data, err := os.ReadFile(filepath.Join(state, "grandchild.pid"))
	require.NoError(t, err)
	child, err := strconv.Atoi(string(data))
	require.NoError(t, err)
	defer func() { _ = syscall.Kill(child, syscall.SIGKILL) }()

	for _, p := range []int{pid, child} {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/environ")
		require.NoError(t, err)
		require.NotContains(t, string(raw), "PRIVATE KEY", "pid %d", p)
		require.NotContains(t, string(raw), "server_key", "pid %d", p)
	}
	// The descriptor the key came through is closed: the child inherits
	// no pipe, nor anything but the sealed copy of a locked binary.
	for fd, target := range openFiles(t, child) {
		require.False(t, fd > 2 && strings.HasPrefix(target, "pipe:"), "fd %d of the child is a pipe: %s", fd, target)
	}
}

// TestInheritedDescriptorsDoNotReachPlugins: a descriptor Lethe inherited
// without close-on-exec (from a shell, a supervisor) is not passed on.
func TestInheritedDescriptorsDoNotReachPlugins(t *testing.T) {
	var p [2]int
	require.NoError(t, syscall.Pipe(p[:])) // no O_CLOEXEC, like an inherited descriptor
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	leaked, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(p[0]))
	require.NoError(t, err)

	dir := pluginDir(t)
	addBinary(t, dir, "noop")
	h := newHost(t, &Config{Dir: dir})
	for fd, target := range openFiles(t, currentPID(t, h, "noop")) {
		require.NotEqual(t, leaked, target, "fd %d of the plugin is Lethe's inherited pipe", fd)
	}
}

// openFiles maps a process's descriptors to what they refer to.
func openFiles(t *testing.T, pid int) map[int]string {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[int]string{}
	for _, fd := range fds {
		n, _ := strconv.Atoi(fd.Name())
		out[n], _ = os.Readlink(filepath.Join(dir, fd.Name()))
	}
	return out
}

// selfSigned makes a throwaway client certificate.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestPluginRefusesOtherClients dials a real plugin process's socket.
func TestPluginRefusesOtherClients(t *testing.T) {
	dir := pluginDir(t)
	addBinary(t, dir, "noop")
	h := newHost(t, &Config{Dir: dir})
	info, _ := h.Plugin("noop")
	b := h.plugins[info.Name].bin
	b.mu.Lock()
	addr := b.cur.client.ReattachConfig().Addr
	b.mu.Unlock()

	dial := func(cfg *tls.Config) error {
		c, err := net.Dial(addr.Network(), addr.String())
		require.NoError(t, err)
		defer c.Close()
		tc := tls.Client(c, cfg)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			return err
		}
		// TLS 1.3: the server judges the client's certificate after the
		// client's handshake returns; the refusal arrives on the next read.
		_, err = io.ReadFull(tc, make([]byte, 1))
		return err
	}
	base := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13} // the client trusts anything: the plugin must refuse
	err := dial(base)
	require.Error(t, err, "no client certificate")
	require.Contains(t, err.Error(), "certificate required")

	wrong := base.Clone()
	cert := selfSigned(t)
	wrong.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	err = dial(wrong)
	require.Error(t, err, "a certificate the host did not make")
	require.Contains(t, err.Error(), "remote error: tls: unknown certificate authority")

	old := wrong.Clone()
	old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	err = dial(old)
	require.Error(t, err, "TLS 1.2")
	require.Contains(t, err.Error(), "protocol version")

	got := run(t, h, "noop", SessionOptions{}, "still-fine")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome, "the host's own connection works")
}

// TestHostRefusesOtherServerCertificates: a plugin that serves a
// certificate of its own, or announces one in its handshake line, is
// refused.
func TestHostRefusesOtherServerCertificates(t *testing.T) {
	// Each misbehaving binary is refused on its own, as a Problem, and
	// the healthy one next to it loads.
	refused := func(t *testing.T, cfg *Config, binary string) string {
		t.Helper()
		addBinary(t, cfg.Dir, "noop")
		err := onlyProblem(t, cfg, binary)
		require.NotNil(t, err)
		return err.Error()
	}
	t.Run("own certificate", func(t *testing.T) {
		dir := pluginDir(t)
		bin := addScript(t, dir, "own", "-names=example.com/own", "-tls=own")
		msg := refused(t, &Config{Dir: dir, StartTimeout: 10 * time.Second}, bin)
		require.Contains(t, msg, "refusing its TLS connection")
		require.Contains(t, msg, "certificate")
	})
	t.Run("sixth field", func(t *testing.T) {
		dir := pluginDir(t)
		bin := addScript(t, dir, "line", "-names=example.com/line", "-tls=line")
		msg := refused(t, &Config{Dir: dir, StartTimeout: 10 * time.Second}, bin)
		require.Contains(t, msg, "handshake line carries a certificate of its own")
	})
	t.Run("sixth field with mTLS off does not crash the host", func(t *testing.T) {
		dir := pluginDir(t)
		bin := addScript(t, dir, "line", "-names=example.com/line", "-tls=line")
		msg := refused(t, &Config{Dir: dir, DisableAutoMTLS: true, StartTimeout: 10 * time.Second}, bin)
		require.Contains(t, msg, "the plugin's handshake line made go-plugin fail")
	})
}

// TestLockedBinarySwappedDuringStartNeverRuns swaps a locked binary on
// disk right after the host hashed it, before it runs: the original runs,
// at the first start and at a restart, and the swapped code never does.
func TestLockedBinarySwappedDuringStartNeverRuns(t *testing.T) {
	dir := pluginDir(t)
	marks := t.TempDir()
	path := addScript(t, dir, "test", "-names=example.com/test", "-touch="+filepath.Join(marks, "original"))
	_, err := WriteLock(dir, "")
	require.NoError(t, err)

	swaps := 0
	testHookSealed = func(exe string) {
		swaps++
		evil := filepath.Join(dir, ".evil")
		script := "#!/bin/sh\ntouch " + filepath.Join(marks, "swapped") + "\nexec " + filepath.Join(binDir, "testplugin") + " -names=example.com/test\n"
		require.NoError(t, os.WriteFile(evil, []byte(script), 0o755))
		require.NoError(t, os.Rename(evil, exe))
	}
	t.Cleanup(func() { testHookSealed = nil })
	h := newHost(t, &Config{Dir: dir, RestartBackoff: time.Millisecond})
	require.Equal(t, 1, swaps)
	require.FileExists(t, filepath.Join(marks, "original"))
	require.NoFileExists(t, filepath.Join(marks, "swapped"), "the swapped binary ran")
	info, _ := h.Plugin("example.com/test")
	require.Equal(t, ChecksumLocked, info.ChecksumStatus)

	// A restart runs the sealed copy again, not what is on disk now.
	require.NoError(t, os.Remove(filepath.Join(marks, "original")))
	pid := currentPID(t, h, "example.com/test")
	require.NoError(t, syscall.Kill(-pid, syscall.SIGKILL))
	got := run(t, h, "example.com/test", SessionOptions{}, "a")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	require.NotEqual(t, pid, currentPID(t, h, "example.com/test"))
	require.FileExists(t, filepath.Join(marks, "original"))
	require.NoFileExists(t, filepath.Join(marks, "swapped"))
	require.Equal(t, path, info.Binary)
}

// TestOwnershipRule: the plugin folder, every folder above it, every
// binary and the lock file must be owned by Lethe's user or root and not
// writable by group or others; symlinks are followed and checked.
func TestOwnershipRule(t *testing.T) {
	nobody := 65534
	for _, tc := range []struct {
		name string
		// binary: the culprit refuses that binary alone (a Problem, the
		// other plugins load); otherwise New fails and nothing runs.
		binary bool
		// setup installs the plugin "bad" (a script that creates mark when
		// it runs) and returns the culprit.
		setup func(t *testing.T, dir, mark string) string
		want  string
	}{
		{"group-writable binary", true, func(t *testing.T, dir, mark string) string {
			p := addMarked(t, dir, "bad", mark)
			require.NoError(t, os.Chmod(p, 0o775))
			return p
		}, "is group-writable (mode -rwxrwxr-x)"},
		{"world-writable binary", true, func(t *testing.T, dir, mark string) string {
			p := addMarked(t, dir, "bad", mark)
			require.NoError(t, os.Chmod(p, 0o757))
			return p
		}, "is world-writable"},
		{"binary owned by another user", true, func(t *testing.T, dir, mark string) string {
			p := addMarked(t, dir, "bad", mark)
			require.NoError(t, os.Lchown(p, nobody, nobody))
			return p
		}, "is owned by uid 65534, not by Lethe's user"},
		{"symlink into a writable folder", true, func(t *testing.T, dir, mark string) string {
			other := filepath.Join(filepath.Dir(dir), "elsewhere")
			require.NoError(t, os.Mkdir(other, 0o777))
			require.NoError(t, os.Chmod(other, 0o777))
			p := addMarked(t, other, "bad", mark)
			require.NoError(t, os.Symlink(p, filepath.Join(dir, "bad")))
			return other
		}, "is world-writable"},
		{"symlink planted by another user", true, func(t *testing.T, dir, mark string) string {
			store := filepath.Join(filepath.Dir(dir), "store")
			require.NoError(t, os.Mkdir(store, 0o755))
			p := addMarked(t, store, "bad", mark)
			link := filepath.Join(dir, "bad")
			require.NoError(t, os.Symlink(p, link))
			require.NoError(t, os.Lchown(link, nobody, nobody))
			return link
		}, "is a symbolic link owned by uid 65534"},
		{"group-writable folder", false, func(t *testing.T, dir, mark string) string {
			addMarked(t, dir, "bad", mark)
			require.NoError(t, os.Chmod(dir, 0o775))
			return dir
		}, "is group-writable"},
		{"group-writable folder above", false, func(t *testing.T, dir, mark string) string {
			addMarked(t, dir, "bad", mark)
			require.NoError(t, os.Chmod(filepath.Dir(dir), 0o770))
			return filepath.Dir(dir)
		}, "is group-writable"},
		{"group-writable lock file", false, func(t *testing.T, dir, mark string) string {
			addMarked(t, dir, "bad", mark)
			_, err := WriteLock(dir, "")
			require.NoError(t, err)
			lock := DefaultLockFile(dir)
			require.NoError(t, os.Chmod(lock, 0o664))
			return lock
		}, "is group-writable"},
		{"lock file owned by another user", false, func(t *testing.T, dir, mark string) string {
			addMarked(t, dir, "bad", mark)
			_, err := WriteLock(dir, "")
			require.NoError(t, err)
			lock := DefaultLockFile(dir)
			require.NoError(t, os.Chown(lock, nobody, nobody))
			return lock
		}, "is owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if os.Geteuid() != 0 && strings.Contains(tc.name, "another user") {
				t.Skip("needs root to chown")
			}
			parent := t.TempDir()
			dir := filepath.Join(parent, "plugins")
			require.NoError(t, os.Mkdir(dir, 0o755))
			mark := filepath.Join(t.TempDir(), "bad-ran")
			good := filepath.Join(t.TempDir(), "good-ran")
			addMarked(t, dir, "good", good)
			culprit := tc.setup(t, dir, mark)
			var err error
			if tc.binary {
				h := newHost(t, &Config{Dir: dir})
				probs := h.Problems()
				require.Len(t, probs, 1, "problems")
				require.Equal(t, filepath.Join(dir, "bad"), probs[0].Binary)
				err = probs[0].Err
				_, ok := h.Plugin("example.com/bad")
				require.False(t, ok, "the refused binary's plugins are not loaded")
				_, ok = h.Plugin("example.com/good")
				require.True(t, ok, "the other plugins load")
				require.FileExists(t, good)
			} else {
				_, err = New(&Config{Dir: dir})
				require.Error(t, err)
				require.NoFileExists(t, good, "a plugin ran although New failed")
			}
			require.NoFileExists(t, mark, "the refused binary ran")
			msg := err.Error()
			require.Contains(t, msg, culprit+" "+tc.want)
			require.Contains(t, msg, "refusing to trust it")
			require.NotContains(t, msg, "\n")
		})
	}
	t.Run("symlink to a safe place is followed", func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "plugins")
		other := filepath.Join(parent, "store")
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.Mkdir(other, 0o755))
		p := addBinary(t, other, "noop")
		require.NoError(t, os.Symlink("../store/noop", filepath.Join(dir, "noop")))
		_, err := WriteLock(dir, "")
		require.NoError(t, err)
		h := newHost(t, &Config{Dir: dir})
		require.Empty(t, h.Problems())
		info, ok := h.Plugin("noop")
		require.True(t, ok)
		require.Equal(t, filepath.Join(dir, "noop"), info.Binary)
		require.Equal(t, ChecksumLocked, info.ChecksumStatus)
		sum, err := fileSHA256(p)
		require.NoError(t, err)
		require.Equal(t, sum, info.Checksum)
	})
}

// addMarked installs the plugin example.com/<file>: a script that creates
// mark when it runs, which proves whether it ran.
func addMarked(t testing.TB, dir, file, mark string) string {
	t.Helper()
	return addScript(t, dir, file, "-names=example.com/"+file, "-touch="+mark)
}

// TestLockFileOutsideTheFolderAndRequired: the lock file can live outside
// the plugin folder, and a host can require one.
func TestLockFileOutsideTheFolderAndRequired(t *testing.T) {
	dir := pluginDir(t)
	addBinary(t, dir, "noop")
	lock := filepath.Join(t.TempDir(), "plugins.lock")

	_, err := New(&Config{Dir: dir, LockFile: lock, RequireLock: true})
	require.Error(t, err)
	require.Contains(t, err.Error(), "plugin lock file "+lock+" does not exist, and a lock is required")

	_, err = WriteLock(dir, lock)
	require.NoError(t, err)
	require.NoFileExists(t, DefaultLockFile(dir))
	h := newHost(t, &Config{Dir: dir, LockFile: lock, RequireLock: true})
	require.Empty(t, h.Problems())
	info, _ := h.Plugin("noop")
	require.Equal(t, ChecksumLocked, info.ChecksumStatus)
	require.NoError(t, h.Close())

	// Whoever can write the plugin folder cannot drop in a new binary: it
	// is refused on its own and never runs; the pinned plugin still loads.
	mark := filepath.Join(t.TempDir(), "newcomer-ran")
	newcomer := addMarked(t, dir, "newcomer", mark)
	h = newHost(t, &Config{Dir: dir, LockFile: lock, RequireLock: true})
	probs := h.Problems()
	require.Len(t, probs, 1)
	require.Equal(t, newcomer, probs[0].Binary)
	require.Contains(t, probs[0].Err.Error(), "is not in the lock file "+lock)
	require.NotContains(t, probs[0].Err.Error(), "\n")
	_, ok := h.Plugin("example.com/newcomer")
	require.False(t, ok, "the newcomer's plugin is not loaded")
	require.NoFileExists(t, mark, "the newcomer ran")
	info, ok = h.Plugin("noop")
	require.True(t, ok)
	require.Equal(t, ChecksumLocked, info.ChecksumStatus)
}

// TestPluginUser runs plugins as another user: the process has that uid,
// works, and its socket folder is that user's alone.
func TestPluginUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running plugins as another user needs root; run this test as root")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody on this machine")
	}
	dir := pluginDir(t)
	addBinary(t, dir, "noop")
	_, err = WriteLock(dir, "") // runs from the sealed copy: no need for nobody to reach dir
	require.NoError(t, err)
	h := newHost(t, &Config{Dir: dir, PluginUser: "nobody"})
	pid := currentPID(t, h, "noop")
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	require.NoError(t, err)
	require.Contains(t, string(status), "\nUid:\t"+u.Uid+"\t"+u.Uid+"\t"+u.Uid+"\t"+u.Uid+"\n")
	require.Contains(t, string(status), "\nGroups:\t"+u.Gid)
	got := run(t, h, "noop", SessionOptions{}, "a", "b")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)

	env := environ(t, pid)
	require.Equal(t, []string{u.HomeDir}, env["HOME"])
	sock := env["PLUGIN_UNIX_SOCKET_DIR"][0]
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	require.Equal(t, u.Uid, strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)))
	fi, err = os.Stat(h.socketDir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o711), fi.Mode().Perm())

	_, err = New(&Config{Dir: dir, PluginUser: "no-such-user-here"})
	require.ErrorContains(t, err, `plugin user "no-such-user-here": no such user`)
	_, err = New(&Config{Dir: dir, PluginUser: "root"})
	require.ErrorContains(t, err, "is root")
}
