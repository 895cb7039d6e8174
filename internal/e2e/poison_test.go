package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// TestPoisonItemFailsAlone: a plugin process exits on one given item every
// time; in a 2,000-item backup exactly that item fails, and every other item
// is done.
func TestPoisonItemFailsAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// pluginhost's test plugin serves example.com/test, takes every item,
	// and exits the process on an item named "crash".
	build := exec.Command("go", "build", "-o", filepath.Join(e.pluginDir(), "crasher"), "./internal/pluginhost/internal/testplugin")
	build.Dir = "../.."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	items := make([]archivetest.ItemSpec, 2000)
	for i := range items {
		items[i] = archivetest.SpecN(i, 100)
	}
	items[1234].Name = "crash"
	poison := items[1234]
	tarball := filepath.Join(e.dir, "poison.tar.gz")
	f, err := os.Create(tarball)
	require.NoError(t, err)
	require.NoError(t, archivetest.Write(f, items, archivetest.Options{}))
	require.NoError(t, f.Close())
	e.ok("backup", "create", "poison", "--from", tarball)

	r := e.run("backup", "delete", "poison", "--yes")
	require.NotEqual(t, 0, r.code, "an item failed: the backup is not purged\n%s", r)
	b := e.get("poison")
	require.Len(t, b.Unsettled, 1, "only the poison item is unsettled\n%s", r)
	require.Equal(t, poison.Key(), b.Unsettled[0].ItemKey)
	require.Equal(t, "failed", b.Unsettled[0].Outcome)
	require.Contains(t, b.Unsettled[0].Message, "failed while executing this item alone")
	require.NotNil(t, b.Progress)
	var done, failed int64
	for _, c := range b.Progress.Counts {
		done += c.Done
		failed += c.Failed
	}
	require.Equal(t, int64(1), failed, "%+v", b.Progress.Counts)
	require.Equal(t, int64(1999), done, "%+v", b.Progress.Counts)
}

// TestPluginListRefusesAndQuotes: a binary whose file name carries terminal
// escapes, and serves a name another binary serves, is listed quoted on
// stderr with its twin; both are refused, the command exits non-zero, and
// the escape never reaches the output raw, not even in the log lines of
// another such binary that fails at start (the recorder, without the
// environment it needs, panics on stderr).
func TestPluginListRefusesAndQuotes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginNoop, pluginRecorder)
	evil := "evil\x1b[2K\rnoop"
	copyFile(t, filepath.Join(bin, pluginNoop), filepath.Join(e.pluginDir(), evil), 0o750)
	crashing := "evil\x1b[2K\rcrash"
	copyFile(t, filepath.Join(bin, pluginRecorder), filepath.Join(e.pluginDir(), crashing), 0o750)

	r := e.run("plugin", "list")
	require.Equal(t, 1, r.code, "%s", r)
	require.NotContains(t, r.stdout+r.stderr, "\x1b", "no raw escape in the output")
	require.Contains(t, r.stderr, `"`+filepath.Join(e.pluginDir(), `evil\x1b[2K\rnoop`)+`"`)
	require.Contains(t, r.stderr, "refused: "+filepath.Join(e.pluginDir(), pluginNoop)+": ")
	require.Contains(t, r.stderr, "served by 2 binaries")
	require.Contains(t, r.stderr, `"`+filepath.Join(e.pluginDir(), `evil\x1b[2K\rcrash`)+`" failed to start`)
	require.Contains(t, r.stdout, "test.lethe.io/a-first", "the other binaries load")

	r = e.run("plugin", "lock", "--dry-run")
	require.Equal(t, 0, r.code, "%s", r)
	require.NotContains(t, r.stdout, "\x1b")
	require.Contains(t, r.stdout, `"evil\x1b[2K\rnoop"`)
}
