package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runUmask runs lethe under umask 000, so that only the modes Lethe sets
// itself keep others out.
func (e *env) runUmask(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", `umask 000; exec "$0" "$@"`, filepath.Join(bin, "lethe")}, args...)...)
	cmd.Env = e.environ()
	cmd.Dir = e.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Exited()) {
		e.t.Fatalf("lethe %s: %v\n%s", strings.Join(args, " "), err, r)
	}
	if ee != nil {
		r.code = ee.ExitCode()
	}
	return r
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

// TestHomeAndCatalogAreCreatedOwnerOnlyWhateverTheUmask: under umask 000,
// a first `lethe apply` creates the home folder 0700 and the SQLite
// catalog 0600 (SQLite alone would make it 0644, and its -wal and -shm
// files take its mode). An existing catalog that others can read then
// draws one warning line on every command, and works.
func TestHomeAndCatalogAreCreatedOwnerOnlyWhateverTheUmask(t *testing.T) {
	e := newEnv(t)
	home := filepath.Join(t.TempDir(), "new", "home")
	e.extra = append(e.extra, "LETHE_HOME="+home)
	m := e.writeFile("db.yaml", "kind: Database\nmetadata: {name: orders}\n")
	r := e.runUmask("apply", "-f", m)
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, os.FileMode(0o700), mode(t, home), "home folder")
	db := filepath.Join(home, "lethe.db")
	require.Equal(t, os.FileMode(0o600), mode(t, db), "catalog")
	require.NotContains(t, r.stderr, "group or others")

	require.NoError(t, os.Chmod(db, 0o644))
	r = e.runUmask("get", "Database")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "orders")
	require.Contains(t, r.stderr, "the catalog file "+db+" can be read or written by group or others (mode 0644)")
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
}

// TestSecretFileOthersCanReadIsRefused: a --notify-secret-file that group
// or others can read is refused in one line (exit 2, bad usage), as ssh
// refuses a private key; chmod 600 makes the same command work.
func TestSecretFileOthersCanReadIsRefused(t *testing.T) {
	e := newEnv(t)
	secret := e.writeFile("secret", "a long random string\n")
	require.NoError(t, os.Chmod(secret, 0o644))
	args := []string{"retry", "list", "--notify-webhook", "http://127.0.0.1:9/", "--notify-secret-file", secret}
	r := e.run(args...)
	require.Equal(t, 2, r.code, "%s", r)
	require.Contains(t, r.stderr, "--notify-secret-file: "+secret+": mode 0644 is readable or writable by group or others; run chmod 600 "+secret)
	first, rest, _ := strings.Cut(r.stderr, "\n")
	require.Contains(t, first, "mode 0644", "the error is one line")
	require.Equal(t, "Run 'lethe retry list --help' for usage.\n", rest, "then the usual hint of a usage error")

	require.NoError(t, os.Chmod(secret, 0o600))
	e.ok(args...)
}
