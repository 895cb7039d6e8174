package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// run runs the CLI in process with its own home and the given stdin.
func run(t *testing.T, home string, interactive bool, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"LETHE_HOME": home}
	code := Run(context.Background(), args, Streams{
		In: strings.NewReader(stdin), Out: &out, Err: &errb,
		Getenv:        func(k string) string { return env[k] },
		InteractiveIn: interactive,
	}, nil)
	return code, out.String(), errb.String()
}

func newHome(t *testing.T) (home, tarball string) {
	t.Helper()
	dir := t.TempDir()
	tarball = filepath.Join(dir, "b.tar.gz")
	f, err := os.Create(tarball)
	require.NoError(t, err)
	require.NoError(t, archivetest.WriteN(f, 12, 100))
	require.NoError(t, f.Close())
	return filepath.Join(dir, "home"), tarball
}

func TestDeleteAsksOnATerminalAndRefusesWithoutOne(t *testing.T) {
	home, tarball := newHome(t)
	code, _, stderr := run(t, home, false, "", "backup", "create", "b1", "--from", tarball)
	require.Equal(t, 0, code, stderr)

	// No terminal, no --yes: refused, nothing changes.
	code, _, stderr = run(t, home, false, "", "backup", "delete", "b1", "--no-plugins")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "pass --yes")

	// A terminal, answered "n": nothing changes.
	code, _, stderr = run(t, home, true, "n\n", "backup", "delete", "b1", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "Delete backup b1 (12 items")
	require.Contains(t, stderr, "Nothing deleted.")
	code, out, _ := run(t, home, false, "", "backup", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "b1")

	// No plugin installed: refused unless --no-plugins says so.
	code, _, stderr = run(t, home, true, "y\n", "backup", "delete", "b1")
	require.Equal(t, exitPlugins, code, stderr)
	require.Contains(t, stderr, "--no-plugins")

	// Answered "y": deleted (--no-plugins: items settle at once).
	code, out, stderr = run(t, home, true, "y\n", "backup", "delete", "b1", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "backup b1 deleted")
	_, out, _ = run(t, home, false, "", "backup", "list")
	require.Contains(t, out, "No backups")
}

func TestErrorsAreOneLine(t *testing.T) {
	home, _ := newHome(t)
	for _, args := range [][]string{
		{"backup", "get", "nope"},
		{"backup", "create", "Bad_Name", "--from", "x"},
		{"backup", "create", "ok", "--from", "/does/not/exist"},
		{"backup", "create", "ok", "--from", "x", "--ttl", "soon"},
		{"backup", "list", "-o", "xml"},
		{"audit", "--since", "yesterday"},
		{"backup", "delete", "nope", "--yes"},
	} {
		code, _, stderr := run(t, home, false, "", args...)
		require.NotEqual(t, 0, code, "%v", args)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		require.True(t, strings.HasPrefix(lines[0], "Error: "), "%v: %q", args, stderr)
		require.LessOrEqual(t, len(lines), 2, "%v: %q", args, stderr)
		if len(lines) == 2 {
			require.Contains(t, lines[1], "--help", "%v", args)
		}
	}
}

func TestGetDescribeAudit(t *testing.T) {
	home, tarball := newHome(t)
	code, _, stderr := run(t, home, false, "", "backup", "create", "b1", "--from", tarball, "--labels", "team=db")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = run(t, home, false, "", "backup", "create", "b2", "--from", tarball, "--label", "team=web", "--deletion-delay", "1h")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = run(t, home, false, "", "backup", "delete", "b2", "--yes")
	require.Equal(t, 0, code, stderr)

	// get: any kind, by label, as JSON.
	code, out, stderr := run(t, home, false, "", "get", "backups", "-l", "team=db", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Metadata  struct{ Name string }
			Lifecycle struct{ Phase string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, "BackupList", list.Kind)
	require.Len(t, list.Items, 1)
	require.Equal(t, "b1", list.Items[0].Metadata.Name)
	require.Equal(t, "Active", list.Items[0].Lifecycle.Phase)

	code, out, _ = run(t, home, false, "", "get", "Backup", "b2", "-o", "yaml")
	require.Equal(t, 0, code)
	require.Contains(t, out, "phase: Scheduled")

	// describe shows the lifecycle and the audit trail.
	code, out, stderr = run(t, home, false, "", "describe", "backup", "b2")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "Phase:       Scheduled")
	require.Contains(t, out, "Deletion:    scheduled for")
	require.Contains(t, out, "schedule")
	require.Contains(t, out, "cli:")

	// audit filters by kind and name, and since.
	code, out, stderr = run(t, home, false, "", "audit", "--kind", "Backup", "--name", "b2", "--since", "1h", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var entries struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &entries))
	require.Equal(t, "AuditEntryList", entries.Kind)
	var actions []string
	for _, e := range entries.Items {
		require.Equal(t, "AuditEntry", e["kind"])
		res := e["resource"].(map[string]any)
		require.Equal(t, "Backup", res["kind"])
		require.Equal(t, "b2", res["name"])
		actions = append(actions, e["action"].(string))
	}
	require.Equal(t, []string{"create", "schedule"}, actions)

	// describe and get: JSON with kinds.
	code, out, stderr = run(t, home, false, "", "describe", "backup", "b2", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var desc struct {
		Kind     string         `json:"kind"`
		Resource map[string]any `json:"resource"`
		Audit    []map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(out), &desc))
	require.Equal(t, "Description", desc.Kind)
	require.Equal(t, "Backup", desc.Resource["kind"])
	require.Equal(t, "b2", desc.Resource["metadata"].(map[string]any)["name"])
	require.Len(t, desc.Audit, 2)
	require.Equal(t, "AuditEntry", desc.Audit[0]["kind"])
	code, out, stderr = run(t, home, false, "", "get", "backups", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var got struct {
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.NotEmpty(t, got.Items)
	for _, g := range got.Items {
		require.Equal(t, "Backup", g["kind"])
	}

	code, _, stderr = run(t, home, false, "", "describe", "backup", "nope")
	require.Equal(t, exitNotFound, code)
	require.Contains(t, stderr, `backup "nope" not found`)
}
