package pluginhost

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

func TestCrashMidStreamRestartsAndRedelivers(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=example.com/test", "-state="+t.TempDir())
	h := newHost(t, &Config{Dir: dir, RestartBackoff: time.Millisecond})
	pid := currentPID(t, h, "example.com/test")

	items := names(200, func(i int) string { return "item" + strconv.Itoa(i) })
	items[57] = "crash-once"
	got := run(t, h, "example.com/test", SessionOptions{BatchSize: 16}, items...)
	for id, r := range got {
		require.Equal(t, plugin.OutcomeDone, r.Outcome, "item %d: %s", id, r.Message)
	}
	require.NotEqual(t, pid, currentPID(t, h, "example.com/test"), "the crashed process was replaced")
}

func TestPoisonItemFailsAfterMaxRestarts(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=example.com/test", "-state="+t.TempDir())
	h := newHost(t, &Config{Dir: dir, MaxRestarts: 2, RestartBackoff: time.Millisecond})

	got := run(t, h, "example.com/test", SessionOptions{}, "ok", "crash", "ok")
	require.Equal(t, plugin.OutcomeFailed, got[2].Outcome)
	require.Contains(t, got[2].Message, "example.com/test")
	require.Contains(t, got[2].Message, "boom: crashing on purpose")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	require.Equal(t, plugin.OutcomeDone, got[3].Outcome)
}

func TestGivesUpAfterConsecutiveFailuresQuotingStderr(t *testing.T) {
	dir := pluginDir(t)
	marker := filepath.Join(t.TempDir(), "refuse")
	addScript(t, dir, "test", "-names=example.com/test", "-refuse-start-if="+marker)
	h := newHost(t, &Config{Dir: dir, MaxRestarts: 2, RestartBackoff: time.Millisecond})

	// From now on the binary cannot start; kill the running process.
	require.NoError(t, os.WriteFile(marker, nil, 0o644))
	pid := currentPID(t, h, "example.com/test")
	require.NoError(t, syscall.Kill(-pid, syscall.SIGKILL))
	waitFor(t, "the plugin process to be gone", func() bool { return !alive(pid) })

	got := run(t, h, "example.com/test", SessionOptions{}, "a", "b", "c")
	for _, r := range got {
		require.Equal(t, plugin.OutcomeFailed, r.Outcome)
		require.Contains(t, r.Message, "example.com/test")
		require.Contains(t, r.Message, "refusing to start: broken on purpose")
	}
}

func TestHungPluginTimesOutAndIsRestarted(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=example.com/test", "-state="+t.TempDir())
	h := newHost(t, &Config{Dir: dir, CancelGrace: 100 * time.Millisecond, RestartBackoff: time.Millisecond})
	pid := currentPID(t, h, "example.com/test")

	got := run(t, h, "example.com/test", SessionOptions{ItemTimeout: 200 * time.Millisecond}, "ok", "wait-ctx", "hang", "ok")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	require.Equal(t, plugin.OutcomeFailed, got[2].Outcome)
	require.Contains(t, got[2].Message, "timed out after 200ms")
	require.Equal(t, plugin.OutcomeFailed, got[3].Outcome)
	require.Contains(t, got[3].Message, "timed out after 200ms")
	require.Equal(t, plugin.OutcomeDone, got[4].Outcome)
	require.False(t, alive(pid), "the hung process was killed")
	require.NotEqual(t, pid, currentPID(t, h, "example.com/test"))

	// The restarted plugin works.
	got = run(t, h, "example.com/test", SessionOptions{}, "ok")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
}

func TestCloseKillsProcessGroup(t *testing.T) {
	dir := pluginDir(t)
	state := t.TempDir()
	addScript(t, dir, "test", "-names=example.com/test", "-state="+state)
	h, err := New(&Config{Dir: dir, KillGrace: 100 * time.Millisecond})
	require.NoError(t, err)
	pid := currentPID(t, h, "example.com/test")

	got := run(t, h, "example.com/test", SessionOptions{}, "spawn")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	data, err := os.ReadFile(filepath.Join(state, "grandchild.pid"))
	require.NoError(t, err)
	grandchild, err := strconv.Atoi(string(data))
	require.NoError(t, err)
	require.True(t, alive(grandchild))

	require.NoError(t, h.Close())
	waitFor(t, "the plugin and its child to be gone", func() bool { return !alive(pid) && !alive(grandchild) })
}

func TestHungPluginKillReachesChildren(t *testing.T) {
	dir := pluginDir(t)
	state := t.TempDir()
	addScript(t, dir, "test", "-names=example.com/test", "-state="+state)
	h := newHost(t, &Config{Dir: dir, CancelGrace: 50 * time.Millisecond, RestartBackoff: time.Millisecond})
	pid := currentPID(t, h, "example.com/test")
	got := run(t, h, "example.com/test", SessionOptions{ItemTimeout: 100 * time.Millisecond}, "spawn", "hang")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	require.Equal(t, plugin.OutcomeFailed, got[2].Outcome)
	data, err := os.ReadFile(filepath.Join(state, "grandchild.pid"))
	require.NoError(t, err)
	grandchild, err := strconv.Atoi(string(data))
	require.NoError(t, err)
	waitFor(t, "the hung plugin and its child to be gone", func() bool { return !alive(pid) && !alive(grandchild) })
}

// alive reports whether a process exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestLockFile(t *testing.T) {
	dir := pluginDir(t)
	ran := filepath.Join(t.TempDir(), "ran")
	addBinary(t, dir, "noop")
	addScript(t, dir, "test", "-names=example.com/test", "-touch="+ran)
	lock, err := WriteLock(dir, "")
	require.NoError(t, err)
	require.Len(t, lock.Plugins, 2)

	h := newHost(t, &Config{Dir: dir})
	for _, in := range h.Plugins() {
		require.Equal(t, ChecksumLocked, in.ChecksumStatus)
		require.Equal(t, lock.Plugins[filepath.Base(in.Binary)].SHA256, in.Checksum)
	}
	require.NoError(t, h.Close())

	t.Run("changed binary", func(t *testing.T) {
		require.NoError(t, os.Remove(ran))
		addScript(t, dir, "test", "-names=example.com/test", "-touch="+ran, "-long-stderr=1")
		err := onlyProblem(t, &Config{Dir: dir}, filepath.Join(dir, "test"))
		require.Contains(t, err.Error(), "does not match its sha256 in the lock file")
		require.NoFileExists(t, ran, "a refused binary must not run")
	})
	t.Run("binary not in the lock", func(t *testing.T) {
		addScript(t, dir, "newcomer", "-names=example.com/newcomer", "-touch="+ran)
		require.NoError(t, os.Remove(filepath.Join(dir, "test")))
		addScript(t, dir, "test", "-names=example.com/test", "-touch="+ran)
		err := onlyProblem(t, &Config{Dir: dir}, filepath.Join(dir, "newcomer"))
		require.Contains(t, err.Error(), filepath.Join(dir, "newcomer")+" is not in the lock file")
	})
}

func TestWorldWritableRefused(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := pluginDir(t)
		p := addBinary(t, dir, "noop")
		require.NoError(t, os.Chmod(p, 0o777))
		err := onlyProblem(t, &Config{Dir: dir}, p)
		require.Contains(t, err.Error(), p+" is world-writable")
	})
	t.Run("dir", func(t *testing.T) {
		dir := pluginDir(t)
		addBinary(t, dir, "noop")
		require.NoError(t, os.Chmod(dir, 0o777))
		_, err := New(&Config{Dir: dir})
		require.Error(t, err)
		require.Contains(t, err.Error(), "world-writable")
	})
}

func TestUnknownProtocolVersionRefused(t *testing.T) {
	dir := pluginDir(t)
	p := addScript(t, dir, "future", "-names=example.com/future", "-protocol=2")
	err := onlyProblem(t, &Config{Dir: dir}, p)
	require.Contains(t, err.Error(), "protocol version")
	require.Contains(t, err.Error(), "Plugin version: 2")
}

func TestLogsForwardedWithPluginName(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=example.com/test", "-long-stderr=1000000")
	var out syncBuffer
	h := newHost(t, &Config{Dir: dir, Logger: hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})})
	got := run(t, h, "example.com/test", SessionOptions{}, "log")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	waitFor(t, "the plugin's log line", func() bool { return strings.Contains(out.String(), "hello from the plugin") })
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "hello from the plugin") {
			line = l
		}
	}
	require.Contains(t, line, "[WARN]")
	require.Contains(t, line, "plugin.example.com/test")
}

func TestShortSocketDirWithLongTMPDIR(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	require.NoError(t, os.MkdirAll(long, 0o700))
	t.Setenv("TMPDIR", long)
	dir := pluginDir(t)
	addBinary(t, dir, "noop")
	h := newHost(t, &Config{Dir: dir})
	got := run(t, h, "noop", SessionOptions{}, "a")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
}

// TestHungItemDoesNotBlockAnotherBackup: while one backup's item hangs in
// a plugin (and its timeout is far away), another backup's deletion through
// the same plugin proceeds.
func TestHungItemDoesNotBlockAnotherBackup(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=example.com/test", "-state="+t.TempDir())
	h := newHost(t, &Config{Dir: dir, ItemTimeout: time.Hour, KillGrace: 100 * time.Millisecond})
	ctx := context.Background()

	hung, err := h.OpenSession(ctx, "example.com/test", plugin.Backup{Name: "stuck"}, SessionOptions{})
	require.NoError(t, err)
	defer hung.Close()
	require.NoError(t, hung.Send(ctx, Item{ID: 1, Item: plugin.Item{
		Version: "v1", Resource: "configmaps", Namespace: "ns", Name: "hang", Object: []byte(`{"metadata":{"name":"hang"}}`),
	}}))

	got := run(t, h, "example.com/test", SessionOptions{}, names(200, func(int) string { return "ok" })...)
	for id, r := range got {
		require.Equal(t, plugin.OutcomeDone, r.Outcome, "item %d of the other backup", id)
	}
	select {
	case r := <-hung.Results():
		t.Fatalf("the hung item should still be in flight, got %+v", r)
	default:
	}
}

// TestStaleSocketDirsOfDeadHostsAreSwept: a host killed without cleanup
// leaves its socket directory; the next host removes it, and leaves alone
// those of live processes and anything that is not only sockets.
func TestStaleSocketDirsOfDeadHostsAreSwept(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	mk := func(pid int, withFile bool) string {
		d, err := os.MkdirTemp(dir, socketDirPrefix(pid))
		require.NoError(t, err)
		ln, err := net.Listen("unix", filepath.Join(d, "plugin1"))
		require.NoError(t, err)
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		require.NoError(t, ln.Close())
		if withFile {
			require.NoError(t, os.WriteFile(filepath.Join(d, "keep.txt"), nil, 0o600))
		}
		return d
	}
	stale := mk(dead.Process.Pid, false)
	live := mk(os.Getppid(), false)
	notOnlySockets := mk(dead.Process.Pid, true)

	sweepSocketDirs(dir, hclog.NewNullLogger())
	require.NoDirExists(t, stale)
	require.DirExists(t, live)
	require.DirExists(t, notOnlySockets)
}

// onlyProblem opens a host on cfg, wants exactly one Problem, for binary,
// and returns its error.
func onlyProblem(t *testing.T, cfg *Config, binary string) error {
	t.Helper()
	h := newHost(t, cfg)
	probs := h.Problems()
	require.Len(t, probs, 1, "problems")
	require.Equal(t, binary, probs[0].Binary)
	for _, in := range h.Plugins() {
		require.NotEqual(t, binary, in.Binary, "a refused binary's plugins are not loaded")
	}
	return probs[0].Err
}

// TestPoisonItemFailsAlone: a plugin process that exits on one given item
// every time, with many items in flight: exactly that item fails, and the
// others are done.
func TestPoisonItemFailsAlone(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=example.com/test", "-state="+t.TempDir())
	h := newHost(t, &Config{Dir: dir, RestartBackoff: time.Millisecond})
	items := names(2000, func(i int) string { return "item" + strconv.Itoa(i) })
	items[1234] = "crash"
	got := run(t, h, "example.com/test", SessionOptions{BatchSize: 64, Window: 512}, items...)
	var failed []uint64
	for id, r := range got {
		if r.Outcome != plugin.OutcomeDone {
			failed = append(failed, id)
		}
	}
	require.Equal(t, []uint64{1235}, failed, "only the poison item fails")
	require.Contains(t, got[1235].Message, "failed while executing this item alone")
	require.Contains(t, got[1235].Message, "boom: crashing on purpose")
}

// TestFailureCountResetsOnlyOnSuccess: a plugin that answers only failures
// between crashes is given up on after MaxRestarts.
func TestFailureCountResetsOnlyOnSuccess(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=example.com/test", "-state="+t.TempDir())
	h := newHost(t, &Config{Dir: dir, MaxRestarts: 2, RestartBackoff: time.Millisecond})
	items := []string{"fail", "crash", "fail", "crash", "fail", "crash", "fail", "crash", "ok"}
	got := run(t, h, "example.com/test", SessionOptions{BatchSize: 1, Window: 1}, items...)
	require.Contains(t, got[uint64(len(items))].Message, "giving up", "after 3 crashes with only failures between, the binary is given up on")
}
