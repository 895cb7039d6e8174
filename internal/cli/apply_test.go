package cli

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestApplyCommand(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	const m = "kind: Database\nmetadata: {name: orders, namespace: prod}\nspec: {size: 1}\n"

	code, _, stderr := run(t, home, false, "", "apply")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "-f FILE|DIR|- is required")
	code, _, stderr = run(t, home, false, m, "apply", "-f", "-", "-f", "-")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "-f - (stdin) may be given once")
	code, _, _ = run(t, home, false, m, "apply", "-f", "-", "-o", "xml")
	assert.Equal(t, exitUsage, code)

	// The dry run and the real run print the same report, in one schema.
	type report struct {
		DryRun    bool `json:"dryRun"`
		Resources []struct {
			Kind, Namespace, Name, Action, Source string
		} `json:"resources"`
	}
	var dry, real report
	code, out, stderr := run(t, home, false, m, "apply", "-f", "-", "--dry-run", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &dry))
	code, out, stderr = run(t, home, false, m, "apply", "-f", "-", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &real))
	assert.True(t, dry.DryRun)
	assert.False(t, real.DryRun)
	assert.Equal(t, dry.Resources, real.Resources)
	assert.Equal(t, "created", real.Resources[0].Action)
	assert.Equal(t, "stdin#1", real.Resources[0].Source)

	code, out, _ = run(t, home, false, m, "apply", "-f", "-")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "1 unchanged.")

	// A refused manifest: exit 1, one line naming the document and field.
	code, out, stderr = run(t, home, false, "kind: Database\nmetadata: {name: Bad_Name}\n", "apply", "-f", "-")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Equal(t, "Error: stdin, document 1 (Database/Bad_Name): metadata.name: invalid name \"Bad_Name\": use at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit\n", stderr)
}
