package pluginhost

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/pkg/plugin"
)

// binDir holds the plugins built once for all tests: noop, snapshot-files
// and testplugin.
var binDir string

func TestMain(m *testing.M) {
	if dir := os.Getenv(hostHelperEnv); dir != "" {
		os.Exit(hostHelper(dir))
	}
	dir, err := os.MkdirTemp("", "lethe-pluginhost-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-o", dir+"/",
		"./internal/pluginhost/internal/testplugin", "./plugins/noop", "./plugins/snapshot-files")
	cmd.Dir = "../.."
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building test plugins:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// pluginDir returns a new plugin directory.
func pluginDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// addScript installs a plugin in dir: a script that runs testplugin with
// args.
func addScript(t testing.TB, dir, file string, args ...string) string {
	t.Helper()
	path := filepath.Join(dir, file)
	script := "#!/bin/sh\nexec " + filepath.Join(binDir, "testplugin") + " " + strings.Join(args, " ") + "\n"
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path
}

// addBinary copies a built plugin into dir.
func addBinary(t testing.TB, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(binDir, name))
	require.NoError(t, err)
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, data, 0o755))
	return path
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newHost(t testing.TB, cfg *Config) *Host {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: hclog.DefaultOutput, Level: hclog.Warn})
	}
	h, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	return h
}

// run sends items named names through the plugin and returns one result
// per id, failing the test on a duplicate.
func run(t testing.TB, h *Host, name string, opts SessionOptions, names ...string) map[uint64]Result {
	t.Helper()
	ctx := context.Background()
	s, err := h.OpenSession(ctx, name, plugin.Backup{Name: "b1"}, opts)
	require.NoError(t, err)
	defer s.Close()
	got := map[uint64]Result{}
	done := make(chan struct{})
	var dup []uint64
	go func() {
		defer close(done)
		for r := range s.Results() {
			if _, ok := got[r.ID]; ok {
				dup = append(dup, r.ID)
			}
			got[r.ID] = r
		}
	}()
	for i, n := range names {
		require.NoError(t, s.Send(ctx, Item{ID: uint64(i + 1), Item: plugin.Item{
			Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "ns", Name: n,
			Object: []byte(`{"metadata":{"name":"` + n + `"}}`),
		}}))
	}
	s.CloseSend()
	<-done
	require.Empty(t, dup, "results recorded twice")
	require.Len(t, got, len(names), "every item gets exactly one result")
	return got
}

func names(n int, f func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func currentPID(t testing.TB, h *Host, name string) int {
	t.Helper()
	info, ok := h.Plugin(name)
	require.True(t, ok)
	b := h.plugins[info.Name].bin
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur == nil {
		return 0
	}
	return b.cur.pid
}

// waitFor polls cond; it never asserts how long something took.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
