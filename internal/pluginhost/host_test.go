package pluginhost

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

func TestDiscoverySortsAndDescribes(t *testing.T) {
	dir := pluginDir(t)
	addBinary(t, dir, "noop")
	addScript(t, dir, "multi", "-names=example.com/zeta,acme.io/alpha", "-resources=pods,*.snapshot.storage.k8s.io")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("not a plugin"), 0o644))

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

func TestDuplicateNamesRefusedNamingBothBinaries(t *testing.T) {
	dir := pluginDir(t)
	a := addScript(t, dir, "first", "-names=example.com/dup")
	b := addScript(t, dir, "second", "-names=example.com/other,example.com/dup")
	_, err := New(&Config{Dir: dir})
	require.Error(t, err)
	require.Contains(t, err.Error(), `"example.com/dup"`)
	require.Contains(t, err.Error(), a)
	require.Contains(t, err.Error(), b)
}

func TestInvalidNameRefused(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "bad", "-names=Not_A_Domain/x")
	// The SDK refuses the name itself, so the binary exits at start.
	_, err := New(&Config{Dir: dir})
	require.Error(t, err)
	require.Contains(t, err.Error(), "Not_A_Domain")
}

func TestExecuteOutcomes(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=lethe.io/test", "-state="+t.TempDir())
	h := newHost(t, &Config{Dir: dir})
	pid := currentPID(t, h, "test")

	got := run(t, h, "test", SessionOptions{}, "ok", "blocked", "skip", "fail", "panic", "ok2")
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
	require.Equal(t, pid, currentPID(t, h, "test"))
	got = run(t, h, "test", SessionOptions{}, "after-panic")
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	require.Equal(t, pid, currentPID(t, h, "test"))
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
