package pluginhost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

func TestDiscoverySortsAndDescribes(t *testing.T) {
	dir := pluginDir(t)
	addBinary(t, dir, "noop")
	addScript(t, dir, "multi", "-names=example.com/zeta,acme.io/alpha", "-resources=pods,*.snapshot.storage.k8s.io")
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".README"), []byte("hidden: not a plugin"), 0o644))

	h := newHost(t, &Config{Dir: dir})
	var got []string
	for _, in := range h.Plugins() {
		got = append(got, in.Name)
	}
	require.Equal(t, []string{"acme.io/alpha", "example.com/zeta", "lethe.io/noop"}, got)

	alpha, ok := h.Plugin("acme.io/alpha")
	require.True(t, ok)
	require.Equal(t, filepath.Join(dir, "multi"), alpha.Binary)
	require.Equal(t, plugin.ProtocolVersion, alpha.ProtocolVersion)
	require.Equal(t, "v0.0.1-test", alpha.Version)
	require.Equal(t, 4, alpha.MaxConcurrency)
	require.Equal(t, ChecksumUnlocked, alpha.ChecksumStatus)
	require.Equal(t, "res=pods,*.snapshot.storage.k8s.io", alpha.Selector.String())
	require.True(t, alpha.Matcher.Matches(plugin.Item{Resource: "pods", Namespace: "a"}, nil))
	require.True(t, alpha.Matcher.Matches(plugin.Item{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshots", Namespace: "a"}, nil))
	require.False(t, alpha.Matcher.Matches(plugin.Item{Group: "apps", Resource: "deployments", Namespace: "a"}, nil))

	noop, ok := h.Plugin("noop") // bare name
	require.True(t, ok)
	require.Equal(t, "lethe.io/noop", noop.Name)
	require.Equal(t, "all items", noop.Selector.String())
}

func TestDuplicateNamesRefuseBothBinariesOthersLoad(t *testing.T) {
	dir := pluginDir(t)
	a := addScript(t, dir, "first", "-names=example.com/dup")
	b := addScript(t, dir, "second", "-names=example.com/other,example.com/dup")
	addBinary(t, dir, "noop")
	h := newHost(t, &Config{Dir: dir})
	require.Equal(t, []string{"lethe.io/noop"}, pluginNames(h), "the binary without a duplicate loads")
	probs := h.Problems()
	require.Len(t, probs, 2)
	require.Equal(t, a, probs[0].Binary)
	require.Equal(t, []string{"example.com/dup"}, probs[0].Names)
	require.Equal(t, b, probs[1].Binary)
	require.Equal(t, []string{"example.com/dup", "example.com/other"}, probs[1].Names)
	for _, p := range probs {
		require.ErrorContains(t, p.Err, "example.com/dup is served by 2 binaries, "+a+" and "+b)
	}
}

func TestInvalidNameIsAProblem(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "bad", "-names=Not_A_Domain/x")
	// The SDK refuses the name itself, so the binary exits at start.
	h := newHost(t, &Config{Dir: dir})
	require.Empty(t, h.Plugins())
	require.Len(t, h.Problems(), 1)
	require.ErrorContains(t, h.Problems()[0].Err, "Not_A_Domain")
}

// TestHostRefusesWhatTheSDKWouldHave: a binary not built with the SDK
// (served raw, without TLS) that claims a reserved name, reports a bad
// version, or an escape sequence, is a Problem, and the others load.
func TestHostRefusesWhatTheSDKWouldHave(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"reserved prefix":   {[]string{"-raw=lethe.io/aws"}, "reserved for Lethe's own plugins"},
		"bare name":         {[]string{"-raw=aws"}, "reserved for Lethe's own plugins"},
		"escape in version": {[]string{"-raw=example.com/x", "'-version=v1\x1b[2K'"}, `version "v1\x1b[2K"`},
		"long version":      {[]string{"-raw=example.com/x", "-version=" + strings.Repeat("1", 65)}, "at most 64"},
		"escape in name":    {[]string{"'-raw=example.com/x\x1b[2K'"}, `"example.com/x\x1b[2K"`},
	} {
		t.Run(name, func(t *testing.T) {
			dir := pluginDir(t)
			addScript(t, dir, "raw", tc.args...)
			addScript(t, dir, "good", "-raw=example.com/good")
			h := newHost(t, &Config{Dir: dir, DisableAutoMTLS: true})
			require.Equal(t, []string{"example.com/good"}, pluginNames(h))
			require.Len(t, h.Problems(), 1)
			require.Equal(t, filepath.Join(dir, "raw"), h.Problems()[0].Binary)
			require.ErrorContains(t, h.Problems()[0].Err, tc.want)
			require.NotContains(t, h.Problems()[0].Err.Error(), "\x1b", "no raw escape in the error")
		})
	}
}

func TestPluginDirErrors(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		typo := filepath.Join(t.TempDir(), "typo")
		_, err := New(&Config{Dir: typo})
		require.ErrorIs(t, err, ErrPluginDirMissing)
		require.EqualError(t, err, "plugin directory "+typo+" does not exist")
		var de *PluginDirError
		require.ErrorAs(t, err, &de)
	})
	t.Run("not a directory", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(f, nil, 0o755))
		_, err := New(&Config{Dir: f})
		require.ErrorContains(t, err, "not a directory")
	})
	t.Run("unreadable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads any directory")
		}
		dir := pluginDir(t)
		require.NoError(t, os.Chmod(dir, 0o311))
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		_, err := New(&Config{Dir: dir})
		var de *PluginDirError
		require.ErrorAs(t, err, &de)
	})
	t.Run("not executable", func(t *testing.T) {
		dir := pluginDir(t)
		addBinary(t, dir, "noop")
		p := addBinary(t, dir, "snapshot-files")
		require.NoError(t, os.Chmod(p, 0o644))
		readme := filepath.Join(dir, "README")
		require.NoError(t, os.WriteFile(readme, nil, 0o644))
		_, err := New(&Config{Dir: dir})
		var ne *NotExecutableError
		require.ErrorAs(t, err, &ne)
		require.Equal(t, readme, ne.Path)
		require.Equal(t, []string{p}, ne.More)
		require.NotContains(t, err.Error(), "\n", "one line")
	})
	t.Run("pinned but absent", func(t *testing.T) {
		dir := pluginDir(t)
		addBinary(t, dir, "noop")
		p := addBinary(t, dir, "snapshot-files")
		_, err := WriteLock(dir, "")
		require.NoError(t, err)
		require.NoError(t, os.Remove(p))
		_, err = New(&Config{Dir: dir})
		var me *LockedBinaryMissingError
		require.ErrorAs(t, err, &me)
		require.Equal(t, "snapshot-files", me.Name)
	})
	t.Run("empty is not an error", func(t *testing.T) {
		dir := pluginDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, ".hidden"), nil, 0o644))
		h := newHost(t, &Config{Dir: dir})
		require.Empty(t, h.Plugins())
		require.Empty(t, h.Problems())
	})
}

func pluginNames(h *Host) []string {
	var out []string
	for _, in := range h.Plugins() {
		out = append(out, in.Name)
	}
	return out
}

func TestExecuteOutcomes(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=example.com/test", "-state="+t.TempDir())
	h := newHost(t, &Config{Dir: dir})
	pid := currentPID(t, h, "example.com/test")

	got := run(t, h, "example.com/test", SessionOptions{}, "ok", "blocked", "skip", "fail", "panic", "ok2")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	require.Equal(t, plugin.OutcomeBlocked, got[2].Outcome)
	require.Equal(t, "locked", got[2].Message)
	require.NotZero(t, got[2].RetryAfter)
	require.Equal(t, plugin.OutcomeSkipped, got[3].Outcome)
	require.Equal(t, plugin.OutcomeFailed, got[4].Outcome)
	require.Equal(t, "failed on purpose", got[4].Message)
	require.Equal(t, plugin.OutcomeFailed, got[5].Outcome)
	require.Contains(t, got[5].Message, "panicked: test panic")
	require.Equal(t, plugin.OutcomeDone, got[6].Outcome)

	// The panic did not kill the process.
	require.Equal(t, pid, currentPID(t, h, "example.com/test"))
	got = run(t, h, "example.com/test", SessionOptions{}, "after-panic")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	require.Equal(t, pid, currentPID(t, h, "example.com/test"))
}

func TestEveryItemExactlyOnce(t *testing.T) {
	dir := pluginDir(t)
	addBinary(t, dir, "noop")
	h := newHost(t, &Config{Dir: dir})
	for _, opts := range []SessionOptions{{}, {BatchSize: 1, Window: 1}, {BatchSize: 7, Window: 30}} {
		got := run(t, h, "noop", opts, names(5000, func(i int) string { return "item" })...)
		for _, r := range got {
			require.Equal(t, plugin.OutcomeDone, r.Outcome)
		}
	}
}
