package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// bin holds what TestMain builds: lethe and the noop plugin.
var bin string

// cmdTimeout bounds every lethe command a test runs.
const cmdTimeout = 90 * time.Second

// buildLethe builds lethe, the noop plugin and the test recorder plugin
// (internal/deletion/testdata/recorder) into a temporary folder.
func buildLethe() (string, error) {
	dir, err := os.MkdirTemp("", "lethe-browser-bin-")
	if err != nil {
		return "", err
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/lethe", "./plugins/noop", "./internal/deletion/testdata/recorder")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return dir, fmt.Errorf("building lethe and the noop plugin: %w", err)
	}
	return dir, nil
}

// env is one Lethe installation: its own home (a SQLite catalog) with
// the plugins installed; the recorder's control folder makes an item
// fail while a file ITEM.fail is in it.
type env struct {
	t                  *testing.T
	home, dir          string
	record, control    string
	recorderConfigured bool
}

func newEnv(t *testing.T, plugins ...string) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{t: t, home: filepath.Join(base, "home"), dir: filepath.Join(base, "scratch"),
		record: filepath.Join(base, "record.txt"), control: filepath.Join(base, "control")}
	for _, d := range []string{e.dir, e.control, filepath.Join(e.home, "plugins")} {
		require.NoError(t, os.MkdirAll(d, 0o750))
	}
	for _, p := range plugins {
		b, err := os.ReadFile(filepath.Join(bin, p)) //nolint:gosec // built by TestMain
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(e.home, "plugins", p), b, 0o750)) //nolint:gosec // a plugin must be executable
		e.recorderConfigured = e.recorderConfigured || p == "recorder"
	}
	return e
}

// failItems makes items 1 to n of every backup fail in the recorder.
func (e *env) failItems(n int) {
	e.t.Helper()
	old, err := filepath.Glob(filepath.Join(e.control, "*.fail"))
	require.NoError(e.t, err)
	for _, f := range old {
		require.NoError(e.t, os.Remove(f))
	}
	for i := 1; i <= n; i++ {
		require.NoError(e.t, os.WriteFile(filepath.Join(e.control, archivetest.SpecN(i, 200).Name+".fail"), nil, 0o600))
	}
}

// retryStates maps each retry row's ID to its state, as lethe retry
// list prints them.
func (e *env) retryStates() map[int64]string {
	e.t.Helper()
	var l struct {
		Items []struct {
			ID    int64  `json:"id"`
			State string `json:"state"`
		} `json:"items"`
	}
	out := e.ok("retry", "list", "-o", "json").stdout
	require.NoError(e.t, json.Unmarshal([]byte(out), &l), out)
	m := map[int64]string{}
	for _, it := range l.Items {
		m[it.ID] = it.State
	}
	return m
}

// result is one finished lethe command.
type result struct {
	code           int
	stdout, stderr string
}

func (e *env) command(ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "lethe"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.home, "LETHE_HOME=" + e.home, "TZ=UTC"}
	if e.recorderConfigured {
		// Plugins inherit no environment: lethe hands the recorder its own.
		cmd.Env = append(cmd.Env, "LETHE_PLUGIN_ENV=recorder:LETHE_RECORD_FILE="+e.record+"\nrecorder:LETHE_RECORD_CONTROL_DIR="+e.control)
	}
	cmd.Dir = e.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	return cmd, &out, &errb
}

// ok runs lethe to the end and requires exit code 0.
func (e *env) ok(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, out, errb := e.command(ctx, args...)
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else {
		require.NoError(e.t, err, "lethe %s", strings.Join(args, " "))
	}
	require.Equal(e.t, 0, r.code, "lethe %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.stdout, r.stderr)
	return r
}

// create registers a backup of n generated items.
func (e *env) create(name string, n int, flags ...string) {
	e.t.Helper()
	p := filepath.Join(e.dir, name+".tar.gz")
	f, err := os.Create(p) //nolint:gosec // the test's own scratch folder
	require.NoError(e.t, err)
	require.NoError(e.t, archivetest.WriteN(f, n, 200))
	require.NoError(e.t, f.Close())
	e.ok(append([]string{"backup", "create", name, "--from", p}, flags...)...)
}

// phase is the backup's phase as lethe backup get reports it.
func (e *env) phase(name string) string {
	e.t.Helper()
	var b struct {
		Kind      string `json:"kind"`
		Lifecycle struct {
			Phase string `json:"phase"`
		} `json:"lifecycle"`
	}
	out := e.ok("backup", "get", name, "-o", "json").stdout
	require.NoError(e.t, json.Unmarshal([]byte(out), &b), out)
	require.Equal(e.t, "Backup", b.Kind, out)
	return b.Lifecycle.Phase
}

// server starts lethe server with the API on a free loopback port and
// returns its base URL once /readyz answers.
func (e *env) server(args ...string) string {
	e.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(e.t, err)
	addr := ln.Addr().String()
	require.NoError(e.t, ln.Close())
	ctx, cancel := context.WithCancel(context.Background())
	cmd, out, errb := e.command(ctx, append([]string{"server", "--api-addr", addr, "--poll-interval", "200ms"}, args...)...)
	require.NoError(e.t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.t.Cleanup(func() {
		cancel()
		<-done
		if e.t.Failed() {
			e.t.Logf("lethe server stdout:\n%s\nstderr:\n%s", out, errb)
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			e.t.Fatalf("lethe server exited:\n%s\n%s", out, errb)
		default:
		}
		resp, err := http.Get(base + "/readyz") //nolint:noctx // a loopback probe, bounded by the deadline
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the API never became ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// consoleURL is a one-time console login of role, and the login's name.
func (e *env) consoleURL(base, role string) (loginURL, name string) {
	e.t.Helper()
	r := e.ok("console", "url", "--api-addr", strings.TrimPrefix(base, "http://"), "--role", role)
	loginURL = strings.TrimSpace(r.stdout)
	require.True(e.t, strings.HasPrefix(loginURL, base+"/login?token="), loginURL)
	for _, f := range strings.Fields(r.stderr) {
		if strings.HasPrefix(f, "console-") {
			name = strings.Trim(f, ".,:;()'\"")
		}
	}
	require.NotEmpty(e.t, name, r.stderr)
	return loginURL, name
}
