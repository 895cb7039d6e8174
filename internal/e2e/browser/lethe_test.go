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

// buildLethe builds lethe and the noop plugin into a temporary folder.
func buildLethe() (string, error) {
	dir, err := os.MkdirTemp("", "lethe-browser-bin-")
	if err != nil {
		return "", err
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/lethe", "./plugins/noop")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return dir, fmt.Errorf("building lethe and the noop plugin: %w", err)
	}
	return dir, nil
}

// env is one Lethe installation: its own home (a SQLite catalog) with
// the noop plugin installed.
type env struct {
	t    *testing.T
	home string
	dir  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{t: t, home: filepath.Join(base, "home"), dir: filepath.Join(base, "scratch")}
	for _, d := range []string{e.dir, filepath.Join(e.home, "plugins")} {
		require.NoError(t, os.MkdirAll(d, 0o750))
	}
	b, err := os.ReadFile(filepath.Join(bin, "noop"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(e.home, "plugins", "noop"), b, 0o750)) //nolint:gosec // a plugin must be executable
	return e
}

// result is one finished lethe command.
type result struct {
	code           int
	stdout, stderr string
}

func (e *env) command(ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "lethe"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.home, "LETHE_HOME=" + e.home, "TZ=UTC"}
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
func (e *env) server() string {
	e.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(e.t, err)
	addr := ln.Addr().String()
	require.NoError(e.t, ln.Close())
	ctx, cancel := context.WithCancel(context.Background())
	cmd, out, errb := e.command(ctx, "server", "--api-addr", addr, "--poll-interval", "200ms")
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
