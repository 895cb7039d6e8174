package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// bin holds the binaries TestMain builds: lethe and the plugins.
var bin string

// Plugin binaries, by file name in bin.
const (
	pluginRecorder = "recorder"         // internal/deletion/testdata/recorder
	pluginGate     = "gate"             // internal/e2e/testdata/gate
	pluginNoop     = "noop"             // plugins/noop
	pluginSnapshot = "snapshot-files"   // plugins/snapshot-files
	pluginFleet    = "fleetrec"         // internal/e2e/testdata/fleetrec
	pluginNative   = "native-snapshots" // plugins/native-snapshots
)

// The recorder's plugins, in run order.
const (
	recFirst  = "test.lethe.io/a-first"
	recSecond = "test.lethe.io/b-second"
	recPods   = "test.lethe.io/c-pods"
)

// cmdTimeout bounds every lethe process a test runs.
const cmdTimeout = 90 * time.Second

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if out := os.Getenv(measureEnv); out != "" {
		return measureMain(out) // this process only runs and measures one lethe
	}
	dir, err := os.MkdirTemp("", "lethe-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = dir
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	// One go build with -o <dir> writes every main package into dir.
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"./cmd/lethe", "./internal/deletion/testdata/recorder", "./internal/e2e/testdata/gate", "./internal/e2e/testdata/fleetrec",
		"./plugins/noop", "./plugins/snapshot-files", "./plugins/native-snapshots")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building lethe and the plugins:", err)
		return 1
	}
	return m.Run()
}

// env is one isolated Lethe installation: its own home, plugins and
// recorder files.
type env struct {
	t       *testing.T
	home    string
	dir     string // scratch folder for tarballs
	record  string // LETHE_RECORD_FILE
	control string // LETHE_RECORD_CONTROL_DIR
	gate    string // LETHE_GATE_DIR
	cloud   string // LETHE_FAKE_CLOUD_DIR of plugins/native-snapshots
	extra   []string
}

// newEnv makes a fresh home with the given plugin binaries installed.
func newEnv(t *testing.T, plugins ...string) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{
		t:       t,
		home:    filepath.Join(base, "home"),
		dir:     filepath.Join(base, "scratch"),
		record:  filepath.Join(base, "record.txt"),
		control: filepath.Join(base, "control"),
		gate:    filepath.Join(base, "gate"),
		cloud:   filepath.Join(base, "cloud"),
	}
	for _, d := range []string{e.home, e.dir, e.control, e.gate, e.cloud, filepath.Join(e.home, "plugins")} {
		require.NoError(t, os.MkdirAll(d, 0o750))
	}
	for _, p := range plugins {
		copyFile(t, filepath.Join(bin, p), filepath.Join(e.pluginDir(), p), 0o750)
	}
	t.Cleanup(func() { killPluginProcs(t, e.pluginDir()) })
	return e
}

func (e *env) pluginDir() string { return filepath.Join(e.home, "plugins") }

func (e *env) storageDir() string { return filepath.Join(e.home, "storage") }

// tarballPath is where the file storage keeps a backup's tarball.
func (e *env) tarballPath(name string) string {
	return filepath.Join(e.storageDir(), "backups", name, name+".tar.gz")
}

func (e *env) environ() []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + e.home,
		"LETHE_HOME=" + e.home,
		"LETHE_RECORD_FILE=" + e.record,
		"LETHE_RECORD_CONTROL_DIR=" + e.control,
		"LETHE_GATE_DIR=" + e.gate,
		"TZ=UTC",
	}
	// Plugins inherit no environment: configure the test plugins that are
	// installed (lethe refuses configuration for a binary that is not).
	var pluginEnv []string
	forward := func(bin string, kvs ...string) {
		if _, err := os.Stat(filepath.Join(e.pluginDir(), bin)); err == nil {
			for _, kv := range kvs {
				pluginEnv = append(pluginEnv, bin+":"+kv)
			}
		}
	}
	forward(pluginRecorder, "LETHE_RECORD_FILE="+e.record, "LETHE_RECORD_CONTROL_DIR="+e.control)
	forward(pluginGate, "LETHE_GATE_DIR="+e.gate)
	forward(pluginNative, "LETHE_FAKE_CLOUD_DIR="+e.cloud)
	for _, kv := range e.extra {
		if strings.HasPrefix(kv, "LETHE_GATE_") {
			forward(pluginGate, kv)
		}
	}
	env = append(env, "LETHE_PLUGIN_ENV="+strings.Join(pluginEnv, "\n"))
	return append(env, e.extra...)
}

func (e *env) command(ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "lethe"), args...)
	cmd.Env = e.environ()
	cmd.Dir = e.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	return cmd, &out, &errb
}

// result is one finished lethe process.
type result struct {
	args   []string
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return fmt.Sprintf("lethe %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// run runs lethe to the end.
func (e *env) run(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, out, errb := e.command(ctx, args...)
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		e.t.Fatalf("lethe %s: %v\n%s", strings.Join(args, " "), err, r)
	}
	return r
}

// ok runs lethe and requires exit code 0.
func (e *env) ok(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	require.Equal(e.t, 0, r.code, "%s", r)
	return r
}

// proc is a lethe process running in the background.
type proc struct {
	cmd    *exec.Cmd
	out    *bytes.Buffer
	errb   *bytes.Buffer
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

func (e *env) start(args ...string) *proc {
	e.t.Helper()
	return e.startLong(cmdTimeout, args...)
}

// startLong is start with a longer bound than cmdTimeout.
func (e *env) startLong(timeout time.Duration, args ...string) *proc {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd, out, errb := e.command(ctx, args...)
	require.NoError(e.t, cmd.Start())
	p := &proc{cmd: cmd, out: out, errb: errb, done: make(chan struct{}), cancel: cancel}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		cancel()
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process and returns its result; the stdout and
// stderr buffers are safe to read once done is closed.
func (p *proc) wait(t *testing.T) result {
	t.Helper()
	<-p.done
	r := result{args: p.cmd.Args[1:], stdout: p.out.String(), stderr: p.errb.String()}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
	case errors.As(p.err, &ee):
		r.code = ee.ExitCode() // -1 when killed by a signal
	default:
		t.Fatalf("%v: %v", p.cmd.Args, p.err)
	}
	return r
}

// killedBySIGKILL reports whether the process ended from SIGKILL.
func (p *proc) killedBySIGKILL() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// writeTarball writes a gzip Velero tarball of n generated items
// (archivetest.SpecN(i, 200)) and returns its path.
func (e *env) writeTarball(name string, n int) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name+".tar.gz")
	f, err := os.Create(p)
	require.NoError(e.t, err)
	require.NoError(e.t, archivetest.WriteN(f, n, 200))
	require.NoError(e.t, f.Close())
	return p
}

// writeHostile writes a tarball with a path-traversal entry.
func (e *env) writeHostile(name string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name+".tar.gz")
	f, err := os.Create(p)
	require.NoError(e.t, err)
	require.NoError(e.t, archivetest.WriteEntries(f, []archivetest.Entry{
		{Name: "metadata/version", Body: []byte("1.1.0\n")},
		{Name: "resources/pods/namespaces/ns-0/../../../../etc/evil.json", Body: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"evil","namespace":"ns-0"}}`)},
	}, archivetest.Gzip))
	require.NoError(e.t, f.Close())
	return p
}

// create registers a backup of n generated items.
func (e *env) create(name string, n int, flags ...string) {
	e.t.Helper()
	e.ok(append([]string{"backup", "create", name, "--from", e.writeTarball(name, n)}, flags...)...)
}

// backupJSON is the part of `backup get -o json` the tests read.
type backupJSON struct {
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	Phase       string            `json:"phase"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	CreatedAt   time.Time         `json:"createdAt"`
	Spec        struct {
		StorageKey string     `json:"storageKey"`
		Size       int64      `json:"size"`
		Digest     string     `json:"digest"`
		Items      int64      `json:"items"`
		ExpiresAt  *time.Time `json:"expiresAt"`
	} `json:"spec"`
	DueAt      *time.Time `json:"deletionDueAt"`
	DeletingAt *time.Time `json:"deletionTimestamp"`
	Finalizers []string   `json:"finalizers"`
	Progress   *struct {
		Watermark  int64 `json:"watermark"`
		TotalItems int64 `json:"totalItems"`
		Counts     map[string]struct {
			Done, Skipped, Failed, Blocked int64
		} `json:"counts"`
	} `json:"deletionProgress"`
	Unsettled []struct {
		ItemKey  string `json:"itemKey"`
		Plugin   string `json:"plugin"`
		Outcome  string `json:"outcome"`
		Message  string `json:"message"`
		Attempts int    `json:"attempts"`
	} `json:"unsettled"`
}

// UnmarshalJSON reads a Backup object (docs/output.md): metadata,
// spec, status and lifecycle, into the flat fields the tests read.
func (b *backupJSON) UnmarshalJSON(data []byte) error {
	type flat backupJSON
	var o struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name              string            `json:"name"`
			UID               string            `json:"uid"`
			Labels            map[string]string `json:"labels"`
			Annotations       map[string]string `json:"annotations"`
			CreationTimestamp time.Time         `json:"creationTimestamp"`
			DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
			Finalizers        []string          `json:"finalizers"`
		} `json:"metadata"`
		Spec      json.RawMessage `json:"spec"`
		Lifecycle json.RawMessage `json:"lifecycle"`
	}
	if err := json.Unmarshal(data, &o); err != nil {
		return err
	}
	if o.APIVersion != "lethe.io/v1" || o.Kind != "Backup" {
		return fmt.Errorf("not a lethe.io/v1 Backup: %s %s", o.APIVersion, o.Kind)
	}
	var f flat
	if len(o.Lifecycle) > 0 {
		if err := json.Unmarshal(o.Lifecycle, &f); err != nil {
			return err
		}
	}
	var spec struct {
		Spec json.RawMessage `json:"spec"`
	}
	spec.Spec = o.Spec
	if b, err := json.Marshal(spec); err == nil {
		if err := json.Unmarshal(b, &f); err != nil {
			return err
		}
	}
	f.Name, f.UID, f.Labels, f.Annotations = o.Metadata.Name, o.Metadata.UID, o.Metadata.Labels, o.Metadata.Annotations
	f.CreatedAt, f.DeletingAt, f.Finalizers = o.Metadata.CreationTimestamp, o.Metadata.DeletionTimestamp, o.Metadata.Finalizers
	*b = backupJSON(f)
	return nil
}

// listItems reads the items of a list (docs/output.md) of kind.
func listItems(t *testing.T, out, kind string) []json.RawMessage {
	t.Helper()
	var l struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Items      []json.RawMessage `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l), "%s", out)
	require.Equal(t, "lethe.io/v1", l.APIVersion, out)
	require.Equal(t, kind+"List", l.Kind, out)
	require.NotNil(t, l.Items, out)
	return l.Items
}

func (e *env) get(name string) backupJSON {
	e.t.Helper()
	r := e.ok("backup", "get", name, "-o", "json")
	var b backupJSON
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &b), "%s", r)
	return b
}

func (e *env) list() []backupJSON {
	e.t.Helper()
	r := e.ok("backup", "list", "-o", "json")
	var bs []backupJSON
	for _, it := range listItems(e.t, r.stdout, "Backup") {
		var b backupJSON
		require.NoError(e.t, json.Unmarshal(it, &b), "%s", r)
		bs = append(bs, b)
	}
	return bs
}

// requirePurged checks every sign that a backup is gone for good.
func (e *env) requirePurged(name string) {
	e.t.Helper()
	r := e.run("backup", "get", name)
	require.Equal(e.t, 4, r.code, "%s", r)
	requireOneErrorLine(e.t, r, `backup "`+name+`" was purged at `)
	require.NoFileExists(e.t, e.tarballPath(name))
	for _, b := range e.list() {
		require.NotEqual(e.t, name, b.Name, "purged backup still listed")
	}
	st := e.catalog()
	ts, err := st.GetTombstone(context.Background(), catalog.Key{Kind: "Backup", Name: name})
	require.NoError(e.t, err, "tombstone of %s", name)
	require.Equal(e.t, name, ts.Key.Name)
	audit, err := st.ListAudit(context.Background(), catalog.AuditFilter{Kind: "Backup", Name: name})
	require.NoError(e.t, err)
	var purges int
	for _, a := range audit {
		if strings.Contains(a.Action, "purge") {
			purges++
		}
	}
	require.Equal(e.t, 1, purges, "audit purge entries of %s: %+v", name, audit)
}

// catalog opens the home's SQLite catalog from the test process; only
// while no lethe process writes to it, to read what the CLI does not show
// (tombstones, audit, work items).
func (e *env) catalog() catalog.Store {
	e.t.Helper()
	st := e.openCatalog()
	e.t.Cleanup(func() { _ = st.Close() })
	return st
}

// openCatalog is catalog for a caller that closes the store itself.
func (e *env) openCatalog() catalog.Store {
	e.t.Helper()
	st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(e.home, "lethe.db"), &catalog.Config{})
	require.NoError(e.t, err)
	return st
}

// requireOneErrorLine checks DESIGN §7.3's error shape: stdout empty, stderr
// exactly one "Error: …" line, plus "Run '… --help' for usage." for usage
// errors (exit 2).
func requireOneErrorLine(t *testing.T, r result, contains string) {
	t.Helper()
	require.NotEqual(t, 0, r.code, "%s", r)
	require.Empty(t, r.stdout, "an error must print nothing on stdout\n%s", r)
	require.True(t, strings.HasSuffix(r.stderr, "\n"), "%s", r)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.True(t, strings.HasPrefix(lines[0], "Error: "), "%s", r)
	require.Contains(t, lines[0], contains, "%s", r)
	switch len(lines) {
	case 1:
		require.NotEqual(t, 2, r.code, "a usage error should say how to get help\n%s", r)
	case 2:
		require.Regexp(t, `^Run 'lethe( [a-z]+)*? --help' for usage\.$`, lines[1], "%s", r)
		require.Equal(t, 2, r.code, "%s", r)
	default:
		t.Fatalf("want one error line (and a usage hint), got %d lines\n%s", len(lines), r)
	}
}

// readRecord parses the recorder's file: plugin → item key → deliveries.
func (e *env) readRecord() map[string]map[string]int {
	e.t.Helper()
	out := map[string]map[string]int{}
	b, err := os.ReadFile(e.record)
	if errors.Is(err, fs.ErrNotExist) {
		return out
	}
	require.NoError(e.t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		plugin, key, ok := strings.Cut(line, "\t")
		require.True(e.t, ok, "bad record line %q", line)
		if out[plugin] == nil {
			out[plugin] = map[string]int{}
		}
		out[plugin][key]++
	}
	return out
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func copyFile(t *testing.T, from, to string, mode fs.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// treeDigest describes every file under dir (path, size, sha256), to check
// that a command changed nothing.
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	require.NoError(t, err)
	return out
}

// pluginProcs lists the pids of live processes whose executable is in dir.
func pluginProcs(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", ent.Name(), "exe"))
		if err != nil {
			continue
		}
		exe = strings.TrimSuffix(exe, " (deleted)")
		if filepath.Dir(exe) != dir {
			continue
		}
		// A zombie that its parent has not reaped yet is not running.
		if stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// waitNoPluginProcs waits up to d for every plugin process of dir to exit
// and returns those still alive.
func waitNoPluginProcs(dir string, d time.Duration) []int {
	const step = 50 * time.Millisecond
	for i := 0; i < int(d/step); i++ {
		if len(pluginProcs(dir)) == 0 {
			return nil
		}
		time.Sleep(step)
	}
	return pluginProcs(dir)
}

// killPluginProcs kills, by pid, the plugin processes of this test's own
// plugin folder that outlived their lethe (see TestPluginsDieWithLethe).
func killPluginProcs(t *testing.T, dir string) []int {
	pids := pluginProcs(dir)
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Logf("killing leftover plugin process %d: %v", pid, err)
		}
	}
	return pids
}
