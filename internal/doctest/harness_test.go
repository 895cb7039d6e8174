package doctest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHarnessRules: the rules TestDocs relies on can fail.
func TestHarnessRules(t *testing.T) {
	// An untagged block showing a command is no silent skip.
	blocks, err := parse("x.md", "text\n\n```\nlethe backup list\n```\n")
	require.NoError(t, err)
	require.True(t, blocks[0].holdsCommands())
	blocks, err = parse("x.md", "<!-- doctest: skip a reason -->\n```sh\nlethe backup list\n```\n")
	require.NoError(t, err)
	require.Equal(t, "a reason", blocks[0].skip)
	require.False(t, blocks[0].runnable())
	_, err = parse("x.md", "<!-- doctest: skip -->\n```sh\nlethe x\n```\n")
	require.ErrorContains(t, err, "needs an argument")
	_, err = parse("x.md", "<!-- doctest: output -->\nprose\n```\nx\n```\n")
	require.ErrorContains(t, err, "right before a fenced block")

	// Commands: continuations, here-documents, exit codes, servers.
	text, next := takeCommand([]string{"lethe apply -f - <<'YAML'   # exit 3", "kind: A", "YAML", "lethe get a"}, 0)
	require.Equal(t, "lethe apply -f - <<'YAML'   # exit 3\nkind: A\nYAML", text)
	require.Equal(t, 3, next)
	require.Equal(t, 3, wantCode(text))
	require.Equal(t, 5, wantCode("lethe delete a --yes   # refused, exit 5: held"))
	require.True(t, isServer("LETHE_X=1 lethe server --workers 2   # Ctrl-C to stop"))
	require.False(t, isServer("lethe server & sleep 1"))

	// Output: normalised times and spaces, ... for lines, … in a line.
	home := "/tmp/t/home/you"
	require.Empty(t, compare([]string{"a   b  2026-01-02T03:04:05Z (3s ago)", "...", "end …"},
		"a b 2027-11-28T01:02:03Z (225d11h ago)\nx\ny\nend of it\n", home))
	require.Empty(t, compare([]string{"/home/you/x"}, "/tmp/t/home/you/x\n", home))
	require.NotEmpty(t, compare([]string{"2 created."}, "2 unchanged.\n", home))
	require.NotEmpty(t, compare([]string{"one"}, "one\ntwo\n", home), "a line the doc does not show")
	require.NotEmpty(t, compare([]string{"Error: Account \"a\" not found"}, "Error: Account/a: not found\n", home))
}
