package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// streamProc is a lethe process whose stdout a test reads as it comes:
// lines (text) or JSON values (-o json), one at a time.
type streamProc struct {
	cmd    *exec.Cmd
	lines  chan string
	values chan json.RawMessage
	errb   *lockedBuffer
	done   chan struct{}
	err    error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startStream starts lethe and reads its stdout as lines, or, with
// asJSON, as a stream of JSON values.
func (e *env) startStream(asJSON bool, args ...string) *streamProc {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "lethe"), args...)
	cmd.Env = e.environ()
	cmd.Dir = e.dir
	p := &streamProc{cmd: cmd, lines: make(chan string, 100), values: make(chan json.RawMessage, 100), errb: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.errb
	out, err := cmd.StdoutPipe()
	require.NoError(e.t, err)
	require.NoError(e.t, cmd.Start())
	read := make(chan struct{})
	go func() {
		defer close(read)
		if asJSON {
			dec := json.NewDecoder(out)
			for {
				var v json.RawMessage
				if dec.Decode(&v) != nil {
					return
				}
				p.values <- v
			}
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	go func() {
		<-read // Wait closes the pipe: read it to the end first
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

// line is the next line of stdout; the test fails after a while without.
func (p *streamProc) line(t *testing.T) string {
	t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("lethe %q printed no line in 30s; stderr:\n%s", p.cmd.Args[1:], p.errb.String())
		return ""
	}
}

// watchEvent is a WatchEvent as -o json prints it.
type watchEvent struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Type       string          `json:"type"`
	Object     json.RawMessage `json:"object"`
}

// event is the next WatchEvent, with the name and phase of its object.
func (p *streamProc) event(t *testing.T) (ev watchEvent, name, phase string) {
	t.Helper()
	select {
	case v := <-p.values:
		require.NoError(t, json.Unmarshal(v, &ev))
		require.Equal(t, "lethe.io/v1", ev.APIVersion, "%s", v)
		require.Equal(t, "WatchEvent", ev.Kind, "%s", v)
		var o struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Lifecycle struct {
				Phase string `json:"phase"`
			} `json:"lifecycle"`
		}
		require.NoError(t, json.Unmarshal(ev.Object, &o))
		return ev, o.Metadata.Name, o.Lifecycle.Phase
	case <-time.After(30 * time.Second):
		t.Fatalf("lethe %q printed no event in 30s; stderr:\n%s", p.cmd.Args[1:], p.errb.String())
		return
	}
}

// interrupt sends SIGINT (Ctrl-C) and returns the exit code.
func (p *streamProc) interrupt(t *testing.T) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("lethe %q did not stop on SIGINT", p.cmd.Args[1:])
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, p.err)
	return 0
}

// TestWatchThroughTheBinary is issue 26 point 5: get KIND -w and backup
// list -w list, then stream each change another lethe command makes, as
// text rows or one WatchEvent per change with -o json, on SQLite and on
// PostgreSQL; a resource that leaves the selector is DELETED; Ctrl-C ends
// the watch with exit 0 and nothing on stderr.
func TestWatchThroughTheBinary(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, _ func(string, ...any)) {
		e.create("b1", 3)
		e.ok("apply", "-f", e.writeFile("orders.yaml", "kind: Database\nmetadata: {name: orders, namespace: shop, labels: {team: db}}\n"))

		backups := e.startStream(true, "backup", "list", "-w", "-o", "json")
		ev, name, phase := backups.event(t)
		require.Equal(t, []string{"ADDED", "b1", "Active"}, []string{ev.Type, name, phase}, "the listing comes first, as ADDED")

		rows := e.startStream(false, "get", "databases", "-w")
		require.Regexp(t, `^NAMESPACE\s+NAME\s+PHASE\s+OWNERS\s+FINALIZERS\s+AGE$`, rows.line(t))
		require.Regexp(t, `^shop\s+orders\s+Active\s`, rows.line(t))
		selected := e.startStream(true, "get", "databases", "-l", "team=db", "-w", "--watch-only", "-o", "json")

		e.create("b2", 2)
		ev, name, phase = backups.event(t)
		require.Equal(t, []string{"ADDED", "b2", "Active"}, []string{ev.Type, name, phase})

		e.ok("backup", "delete", "b1", "--yes", "--no-plugins")
		ev, name, phase = backups.event(t)
		require.Equal(t, []string{"MODIFIED", "b1", "Deleting"}, []string{ev.Type, name, phase})
		for ev.Type != "DELETED" { // finalizers come off one write at a time
			ev, name, _ = backups.event(t)
			require.Equal(t, "b1", name)
		}

		e.ok("apply", "-f", e.writeFile("users.yaml", "kind: Database\nmetadata: {name: users, namespace: shop, labels: {team: db}}\n"))
		require.Regexp(t, `^shop\s+users\s+Active\s`, rows.line(t))
		ev, name, _ = selected.event(t)
		require.Equal(t, []string{"ADDED", "users"}, []string{ev.Type, name})

		// users leaves the selector: DELETED for the selecting watch, a
		// row for the other.
		e.ok("apply", "-f", e.writeFile("users.yaml", "kind: Database\nmetadata: {name: users, namespace: shop, labels: {team: web}}\n"))
		require.Regexp(t, `^shop\s+users\s+Active\s`, rows.line(t))
		ev, name, _ = selected.event(t)
		require.Equal(t, []string{"DELETED", "users"}, []string{ev.Type, name}, "a resource that leaves the selection")

		for _, p := range []*streamProc{backups, rows, selected} {
			require.Equal(t, 0, p.interrupt(t), "Ctrl-C ends a watch with exit 0; stderr:\n%s", p.errb.String())
			require.Empty(t, strings.TrimSpace(p.errb.String()), "nothing on stderr")
		}
	})
}

// TestStatusThroughTheBinary: lethe status, not on a terminal, prints the
// summary once (exit 0): the resources by kind and phase, and a backup
// deletion in flight (held by the gate plugin) with its name; -o json is
// one Status object. On SQLite and PostgreSQL.
func TestStatusThroughTheBinary(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, _ func(string, ...any)) {
		copyFile(t, filepath.Join(bin, pluginGate), filepath.Join(e.pluginDir(), pluginGate), 0o750)
		e.create("slow", 4)
		e.ok("apply", "-f", e.writeFile("orders.yaml", "kind: Database\nmetadata: {name: orders, namespace: shop}\n"))
		type statusJSON struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Resources  map[string]struct {
				Active, Scheduled, Deleting int64
			} `json:"resources"`
			Deletions []struct {
				Name string `json:"name"`
			} `json:"deletions"`
			Retry     map[string]int64 `json:"retry"`
			Leader    *struct{}        `json:"leader"`
			Locations []struct {
				Name         string  `json:"name"`
				Phase        string  `json:"phase"`
				LastSyncTime *string `json:"lastSyncTime"`
			} `json:"locations"`
		}
		read := func() statusJSON {
			r := e.ok("status", "-o", "json")
			var s statusJSON
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), "%s", r)
			require.Equal(t, "lethe.io/v1", s.APIVersion)
			require.Equal(t, "Status", s.Kind)
			return s
		}
		s := read()
		require.Equal(t, int64(1), s.Resources["Backup"].Active)
		require.Equal(t, int64(1), s.Resources["Database"].Active)
		require.Empty(t, s.Deletions)
		require.Nil(t, s.Leader, "no lethe server has run")
		r := e.ok("status")
		require.Contains(t, r.stdout, "Backup deletions in flight: none")
		require.Contains(t, r.stdout, "Leader:   none (no lethe server has run on this catalog)")

		hold := filepath.Join(e.gate, "hold")
		require.NoError(t, os.WriteFile(hold, nil, 0o600))
		p := e.start("backup", "delete", "slow", "--yes")
		waitForFile(t, p, filepath.Join(e.gate, "started"))
		s = read()
		require.Equal(t, int64(1), s.Resources["Backup"].Deleting)
		require.Len(t, s.Deletions, 1)
		require.Equal(t, "slow", s.Deletions[0].Name)
		r = e.ok("status")
		require.Contains(t, r.stdout, "Backup deletions in flight: 1")
		require.Regexp(t, `\n  slow\s+\d+/\d+`, r.stdout)
		require.NoError(t, os.Remove(hold))
		require.Equal(t, 0, p.wait(t).code)

		// The storage locations, as the last sync recorded them.
		e.ok("backup", "sync")
		s = read()
		require.Len(t, s.Locations, 1, "%+v", s.Locations)
		require.Equal(t, "default", s.Locations[0].Name)
		require.Equal(t, "Available", s.Locations[0].Phase)
		require.NotNil(t, s.Locations[0].LastSyncTime)
		r = e.ok("status")
		require.Regexp(t, `Storage locations:\n\s+NAME\s+PHASE\s+CHECKED\s+SYNCED\s+ERROR\n\s+default\s+Available\s+\S+ ago\s+\S+ ago\s+-\n`, r.stdout)
	})
}
