package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// TestRegistrationBadInput is issue 8 point 7 at registration: each case
// is one clear line and a usage exit code, and leaves nothing behind: no
// record, no tarball, no folder.
func TestRegistrationBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	good := e.writeTarball("good", 5)
	cases := []struct {
		args     []string
		contains string
	}{
		{[]string{"backup", "create", strings.Repeat("a", 253), "--from", good}, "at most 63 allowed"},
		{[]string{"backup", "create", strings.Repeat("b", 64), "--from", good}, "64 characters, at most 63"},
		{[]string{"backup", "create", "ok", "--from", good, "--label", "a b=c"}, `label key "a b"`},
		{[]string{"backup", "create", "ok", "--from", good, "--label", "team=d b"}, `label team="d b"`},
		{[]string{"backup", "create", "ok", "--from", good, "--label", "-x=1"}, `label key "-x"`},
		{[]string{"backup", "create", "ok", "--from", good, "--ttl", "0"}, "--ttl 0: a zero TTL would expire at once"},
		{[]string{"backup", "create", "ok", "--from", good, "--ttl", "0s"}, "leave --ttl out"},
	}
	for _, c := range cases {
		r := e.run(c.args...)
		require.Equal(t, 2, r.code, "%s", r)
		requireOneErrorLine(t, r, c.contains)
		require.Less(t, len(r.stderr), 400, "one readable line\n%s", r)
		require.Empty(t, e.list(), "%s", r)
		require.Empty(t, treeDigest(t, e.storageDir()), "%s left something in storage", r)
	}
	// Kubernetes label syntax is accepted, and a 63-character name.
	name := strings.Repeat("c", 63)
	e.create(name, 5, "--labels", "example.com/tier=db-1,empty=")
	b := e.get(name)
	require.Equal(t, map[string]string{"example.com/tier": "db-1", "empty": ""}, b.Labels)
}

// TestZstdTarballIsStoredAsTarZst: the key follows the magic bytes, not
// the file's name; the backup deletes from that key.
func TestZstdTarballIsStoredAsTarZst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginRecorder)
	p := filepath.Join(e.dir, "misnamed.tar.gz")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, archivetest.Write(f, []archivetest.ItemSpec{archivetest.SpecN(0, 100), archivetest.SpecN(1, 100)}, archivetest.Options{Compression: archivetest.Zstd}))
	require.NoError(t, f.Close())
	r := e.ok("backup", "create", "zz", "--from", p)
	require.Contains(t, r.stdout, "backups/zz/zz.tar.zst")
	require.Equal(t, "backups/zz/zz.tar.zst", e.get("zz").Spec.StorageKey)
	zst := filepath.Join(e.storageDir(), "backups", "zz", "zz.tar.zst")
	require.FileExists(t, zst)
	require.NoFileExists(t, e.tarballPath("zz"))
	e.ok("backup", "delete", "zz", "--yes")
	require.NoFileExists(t, zst)
	require.Len(t, e.readRecord()[recFirst], 2)
}
