package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAbandonAsksForTheNameOnATerminal: --abandon on a terminal asks for
// the backup's name; anything else changes nothing. Without a terminal it
// needs --yes.
func TestAbandonAsksForTheNameOnATerminal(t *testing.T) {
	home, tarball := newHome(t)
	code, _, stderr := run(t, home, false, "", "backup", "create", "b1", "--from", tarball)
	require.Equal(t, 0, code, stderr)

	code, _, stderr = run(t, home, false, "", "backup", "delete", "b1", "--abandon", "--no-plugins")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "needs --yes")

	for _, answer := range []string{"y\n", "yes\n", "b2\n", "\n"} {
		code, _, stderr = run(t, home, true, answer, "backup", "delete", "b1", "--abandon", "--no-plugins")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stderr, "Type the backup's name (b1) to confirm")
		require.Contains(t, stderr, "Nothing deleted.", "answer %q", answer)
		_, out, _ := run(t, home, false, "", "backup", "list")
		require.Contains(t, out, "b1")
		require.Contains(t, out, "Active")
	}

	code, out, stderr := run(t, home, true, "b1\n", "backup", "delete", "b1", "--abandon", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "backup b1 deleted")
	_, out, _ = run(t, home, false, "", "backup", "list")
	require.Contains(t, out, "No backups")
}
