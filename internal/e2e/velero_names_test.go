package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPluginListWarnsOfResourceNamesThatResolveToNothing is issue 24
// point 6 through the binary: `plugin list` resolves a Velero plugin's
// resource names as Velero's discovery does, and warns, on stderr, of
// the one that is no built-in Kubernetes resource ("widgetz.example.io"),
// not of "cm", "pv" or "deploy.apps".
func TestPluginListWarnsOfResourceNamesThatResolveToNothing(t *testing.T) {
	e := newEnv(t)
	vdir := filepath.Join(e.home, "velero-plugins")
	cmd := exec.Command("go", "build", "-o", filepath.Join(vdir, "velero-recorder"), ".")
	cmd.Dir = filepath.Join("..", "pluginhost", "testdata", "veleroplugin")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the Velero plugin: %s", out)
	r := e.ok("plugin", "list", "--plugin-env", "velero-recorder:VELERO_SHORT_NAMES=1")
	require.Contains(t, r.stdout, "example.io/short")
	warnings := strings.Split(strings.TrimSpace(r.stderr), "\n")
	require.Len(t, warnings, 1, r.stderr)
	require.Contains(t, warnings[0], `warning: plugin example.io/short selects resource widgetz.example.io, which is no built-in Kubernetes resource`)
	require.Contains(t, warnings[0], "resources/widgetz.example.io/")
}
