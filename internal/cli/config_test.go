package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func runEnv(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, Streams{
		In: strings.NewReader(""), Out: &out, Err: &errb,
		Getenv: func(k string) string { return env[k] },
	}, nil)
	return code, out.String(), errb.String()
}

// TestConfigFilePrecedence: the file sets what neither a flag nor the
// environment sets; the environment wins over the file, a flag over both.
// Which catalog file gets created says which setting won.
func TestConfigFilePrecedence(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	require.NoError(t, os.MkdirAll(home, 0o750))
	db := func(n string) string { return filepath.Join(dir, n+".db") }
	require.NoError(t, os.WriteFile(filepath.Join(home, "config.yaml"),
		[]byte("store: sqlite://"+db("file")+"\nlog-format: json\nworkers: 3\n"), 0o600))
	env := map[string]string{"LETHE_HOME": home}

	code, _, stderr := runEnv(t, env, "backup", "list")
	require.Equal(t, 0, code, stderr)
	require.FileExists(t, db("file"), "<home>/config.yaml is read by default")

	env["LETHE_STORE"] = "sqlite://" + db("env")
	code, _, stderr = runEnv(t, env, "backup", "list")
	require.Equal(t, 0, code, stderr)
	require.FileExists(t, db("env"), "the environment wins over the file")

	code, _, stderr = runEnv(t, env, "backup", "list", "--store", "sqlite://"+db("flag"))
	require.Equal(t, 0, code, stderr)
	require.FileExists(t, db("flag"), "a flag wins over both")

	// --config names another file.
	other := filepath.Join(dir, "other.yaml")
	require.NoError(t, os.WriteFile(other, []byte("store: sqlite://"+db("other")+"\n"), 0o600))
	delete(env, "LETHE_STORE")
	code, _, stderr = runEnv(t, env, "backup", "list", "--config", other)
	require.Equal(t, 0, code, stderr)
	require.FileExists(t, db("other"))
}

// TestConfigFileIsValidated: an unknown key or a bad value is one line,
// exit 2, and nothing runs; also for a setting of another command.
func TestConfigFileIsValidated(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"bogus: 1\n", `unknown key "bogus"`},
		{"workers: many\n", `workers: invalid value "many": want a whole number`},
		{"lease-ttl: 30d\n", `lease-ttl: invalid value "30d": want a duration`},
		{"log-level: loud\n", `--log-level "loud"`},
		{"log-format: xml\n", `--log-format "xml": use text or json`},
		{"store: [a, b]\n", "store: want one value, got a list of 2"},
		{"store:\n  x: y\n", "not a mapping"},
		{"- a\n- b\n", "want a mapping of settings"},
		{"a: [\n", "not valid YAML"},
		// Strict as manifests are read (issue 26 point 7).
		{"log-format: json\nlog-level: info\nlog-format: text\n", "log-format: given twice (lines 1 and 3)"},
		{"log-level: [info]\n", "log-level: want one value, got a list of 1"},
		{"log-format: json\n---\nlog-level: info\n", "line 3: a second document"},
		{"log-format: json\nlog-level: inf\xff\n", "line 2: not valid UTF-8"},
		{"require-plugin-lock: yes\n", `require-plugin-lock: invalid value "yes": want true or false`},
		{"log-level: &l info\nlog-format: *l\n", "log-format: an alias"},
		{"? [a]\n: b\n", "line 1: a key must be a flag name"},
	} {
		p := filepath.Join(dir, "c.yaml")
		require.NoError(t, os.WriteFile(p, []byte(tc.body), 0o600))
		home := filepath.Join(dir, "home")
		code, out, stderr := runEnv(t, map[string]string{"LETHE_HOME": home}, "backup", "list", "--config", p)
		require.Equal(t, exitUsage, code, "%q: %s", tc.body, stderr)
		require.Empty(t, out)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		require.Len(t, lines, 2, stderr) // the error and the pointer to --help
		require.Contains(t, lines[0], tc.want)
		require.NoDirExists(t, home, "nothing ran")
	}
	code, _, stderr := runEnv(t, map[string]string{}, "backup", "list", "--config", filepath.Join(dir, "missing.yaml"))
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "missing.yaml: no such file")
}

// TestServerFlagsTakeTheirEnvironment: LETHE_WORKERS and friends, checked
// like the flags.
func TestServerFlagsTakeTheirEnvironment(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runEnv(t, map[string]string{"LETHE_HOME": dir, "LETHE_WORKERS": "0"}, "server")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "--workers must be between 1 and 256, got 0")
	code, _, stderr = runEnv(t, map[string]string{"LETHE_HOME": dir, "LETHE_LEASE_TTL": "soon"}, "server")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, `LETHE_LEASE_TTL="soon"`)
}

// TestEveryServerFlagIsAConfigKey: each flag of `lethe server` may be set
// in the config file, so a flag added to the server cannot be refused as
// an unknown key (as --retention-interval once was).
func TestEveryServerFlagIsAConfigKey(t *testing.T) {
	root, _ := newRoot(Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}, Getenv: func(string) string { return "" }}, nil)
	keys := configKeys(root)
	server, _, err := root.Find([]string{"server"})
	require.NoError(t, err)
	n := 0
	server.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		n++
		require.Contains(t, keys, f.Name, "server flag --%s is not a config key", f.Name)
	})
	require.Greater(t, n, 5)

	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte("retention-interval: 5m\n"), 0o600))
	code, _, stderr := runEnv(t, map[string]string{"LETHE_HOME": filepath.Join(dir, "home")}, "backup", "list", "--config", p)
	require.Equal(t, 0, code, stderr)
	code, _, stderr = runEnv(t, map[string]string{"LETHE_HOME": dir, "LETHE_RETENTION_INTERVAL": "soon"}, "server")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, `LETHE_RETENTION_INTERVAL="soon"`)
}

// TestConfigFileOthersCanWriteIsRefused: the config file names the
// plugins' environment, the lock and the catalog, so it gets the plugin
// folder's rule: a file or a folder above it that group or others may
// write is refused, in one line, before any setting is used.
func TestConfigFileOthersCanWriteIsRefused(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	p := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte("store: sqlite://"+filepath.Join(dir, "x.db")+"\n"), 0o600))
	require.NoError(t, os.Chmod(p, 0o666))
	code, out, stderr := runEnv(t, map[string]string{"LETHE_HOME": home}, "backup", "list", "--config", p)
	require.Equal(t, exitError, code, stderr)
	require.Empty(t, out)
	require.Contains(t, stderr, "config file "+p+": "+p+" is world-writable")
	require.NoFileExists(t, filepath.Join(dir, "x.db"), "no setting of the file was used")

	require.NoError(t, os.Chmod(p, 0o644))
	code, _, stderr = runEnv(t, map[string]string{"LETHE_HOME": home}, "backup", "list", "--config", p)
	require.Equal(t, 0, code, stderr)

	sub := filepath.Join(dir, "shared")
	require.NoError(t, os.Mkdir(sub, 0o700))
	require.NoError(t, os.Chmod(sub, 0o770))
	q := filepath.Join(sub, "c.yaml")
	require.NoError(t, os.WriteFile(q, []byte("log-format: json\n"), 0o600))
	code, _, stderr = runEnv(t, map[string]string{"LETHE_HOME": home}, "backup", "list", "--config", q)
	require.Equal(t, exitError, code, stderr)
	require.Contains(t, stderr, sub+" is group-writable")
}
