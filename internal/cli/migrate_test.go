package cli

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMigrate(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	code, out, stderr := run(t, home, false, "", "migrate")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "catalog sqlite://"+filepath.Join(home, "lethe.db")+": every migration is applied; the schema is current\n", out)
	require.FileExists(t, filepath.Join(home, "lethe.db"))
	// Again: nothing to do, same answer.
	code, out2, stderr := run(t, home, false, "", "migrate")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, out, out2)

	code, _, stderr = run(t, home, false, "", "migrate", "now")
	require.Equal(t, exitUsage, code, stderr)

	code, out, stderr = run(t, home, false, "", "--store", "host=db password=S3cr3t", "migrate")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Contains(t, stderr, "password=xxxxx")
	require.NotContains(t, stderr, "S3cr3t")
}
