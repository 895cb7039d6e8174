package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPluginKillGraceFlag: --plugin-kill-grace takes a positive duration;
// anything else is bad usage, in one line.
func TestPluginKillGraceFlag(t *testing.T) {
	home, _ := newHome(t)
	code, _, stderr := run(t, home, false, "", "plugin", "list", "--plugin-kill-grace", "500ms")
	require.Equal(t, 0, code, stderr)
	for _, bad := range []string{"soon", "0", "-1s"} {
		code, _, stderr = run(t, home, false, "", "plugin", "list", "--plugin-kill-grace", bad)
		require.Equal(t, exitUsage, code, bad)
		require.Contains(t, stderr, `--plugin-kill-grace "`+bad+`": use a positive duration such as 2s`)
		first, _, _ := strings.Cut(stderr, "\n")
		require.Contains(t, first, "--plugin-kill-grace")
	}
}
