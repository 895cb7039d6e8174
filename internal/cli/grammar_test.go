package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// TestEveryHelpShowsTheGrammar: every command's --help ends with the one
// flag grammar and exit-code table.
func TestEveryHelpShowsTheGrammar(t *testing.T) {
	root, _ := newRoot(Streams{}, nil)
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(root, nil)
	require.Greater(t, len(paths), 20, "the command tree")
	home := t.TempDir()
	for _, p := range paths {
		code, out, stderr := run(t, home, false, "", append(p, "--help")...)
		require.Equal(t, 0, code, "lethe %s --help: %s", strings.Join(p, " "), stderr)
		require.True(t, strings.HasSuffix(out, grammarFooter), "lethe %s --help ends without the grammar:\n%s", strings.Join(p, " "), out)
		require.Contains(t, out, "4 not found or purged")
	}
}
