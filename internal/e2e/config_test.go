package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExampleConfigWorksAsShipped runs docs/config.example.yaml as it is
// shipped, with only where things live overridden by the environment
// (which wins over the file): every command that loads plugins works,
// and the server's settings in it are valid.
func TestExampleConfigWorksAsShipped(t *testing.T) {
	e := newEnv(t, pluginNoop)
	example, err := filepath.Abs(filepath.Join("..", "..", "docs", "config.example.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(e.storageDir(), 0o750))
	e.extra = append(e.extra, "LETHE_CONFIG="+example,
		"LETHE_STORE=sqlite://"+filepath.Join(e.home, "lethe.db"), "LETHE_STORAGE=file://"+e.storageDir())
	r := e.ok("plugin", "list")
	assert.Contains(t, r.stdout, "lethe.io/noop")
	e.create("b1", 2)
	assert.Contains(t, e.ok("backup", "list").stdout, "b1")
	e.ok("backup", "delete", "b1", "--yes")
	e.requirePurged("b1")
	// The file is read: a copy with a key given twice is refused.
	body, err := os.ReadFile(example)
	require.NoError(t, err)
	twice := e.writeFile("twice.yaml", string(body)+"log-format: text\n")
	e.extra = append(e.extra, "LETHE_CONFIG="+twice)
	r = e.run("backup", "list")
	assert.Equal(t, 2, r.code, "%s", r)
	assert.Contains(t, r.stderr, "log-format: given twice")
	assert.Equal(t, 2, strings.Count(r.stderr, "\n"), "the error and the pointer to --help: %s", r.stderr)
}

// TestMissingStorageFolderIsRefused: a file:// --storage that does not
// exist (a typo) is refused, one line, exit 2, nothing registered and no
// folder created; --create-storage creates it; the default location
// (<home>/storage) is created as before.
func TestMissingStorageFolderIsRefused(t *testing.T) {
	e := newEnv(t)
	typo := filepath.Join(e.dir, "bakups")
	tarball := e.writeTarball("b1", 2)
	for _, args := range [][]string{
		{"--storage", "file://" + typo, "backup", "sync"},
		{"--storage", "file://" + typo, "backup", "create", "b1", "--from", tarball},
	} {
		r := e.run(args...)
		assert.Equal(t, 2, r.code, "%s", r)
		requireOneErrorLine(t, r, "the folder does not exist; check the path, or pass --create-storage")
		assert.NoDirExists(t, typo)
	}
	e.extra = append(e.extra, "LETHE_STORAGE=file://"+typo)
	r := e.run("backup", "create", "b1", "--from", tarball)
	assert.Equal(t, 2, r.code, "the environment too: %s", r)
	assert.NotContains(t, e.ok("backup", "list").stdout, "b1", "nothing registered")
	e.ok("--create-storage", "backup", "create", "b1", "--from", tarball)
	assert.FileExists(t, filepath.Join(typo, "backups", "b1", "b1.tar.gz"))

	// The default location is created.
	d := newEnv(t)
	d.create("b2", 2)
	assert.FileExists(t, d.tarballPath("b2"))
}
