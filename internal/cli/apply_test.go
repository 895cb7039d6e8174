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
		Kind    string `json:"kind"`
		DryRun  bool   `json:"dryRun"`
		Changes []struct {
			Resource struct{ Kind, Namespace, Name string }
			Action   string
			Source   string
		} `json:"changes"`
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
	assert.Equal(t, "ApplyReport", real.Kind)
	assert.Equal(t, dry.Changes, real.Changes)
	require.Len(t, real.Changes, 1)
	assert.Equal(t, "created", real.Changes[0].Action)
	assert.Equal(t, "stdin#1", real.Changes[0].Source)
	assert.Equal(t, "orders", real.Changes[0].Resource.Name)

	code, out, _ = run(t, home, false, m, "apply", "-f", "-")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "1 unchanged.")

	// A refused manifest: exit 1, one line naming the document and field.
	code, out, stderr = run(t, home, false, "kind: Database\nmetadata: {name: Bad_Name}\n", "apply", "-f", "-")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Equal(t, "Error: stdin, document 1 (Database/Bad_Name): metadata.name: invalid name \"Bad_Name\": use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit\n", stderr)
}

// TestDescribeDanglingReferences: describe shows a resource's own
// references with their targets' phases, and an allowDangling reference
// whose target is gone as dangling, in text and in -o json|yaml.
func TestDescribeDanglingReferences(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	const m = `kind: Database
metadata: {name: orders, namespace: prod}
---
kind: Report
metadata: {name: weekly, namespace: prod}
references:
- {kind: Database, namespace: prod, name: orders, onTargetDelete: allowDangling}
- {kind: Database, namespace: prod, name: archive, onTargetDelete: allowDangling}
`
	code, _, stderr := run(t, home, false, m, "apply", "-f", "-")
	require.Equal(t, 0, code, stderr)

	code, out, stderr := run(t, home, false, "", "describe", "Report", "weekly", "-n", "prod")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "References:\n  Database/prod/orders  onTargetDelete=allowDangling, target Active\n  Database/prod/archive  onTargetDelete=allowDangling, dangling (target gone)\n")

	type doc struct {
		Resource struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"resource"`
		References []struct {
			Name        string `json:"name"`
			Dangling    bool   `json:"dangling"`
			TargetPhase string `json:"targetPhase"`
		} `json:"references"`
	}
	code, out, stderr = run(t, home, false, "", "describe", "Report", "weekly", "-n", "prod", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var d doc
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	assert.Equal(t, "weekly", d.Resource.Metadata.Name)
	require.Len(t, d.References, 2)
	assert.False(t, d.References[0].Dangling)
	assert.Equal(t, "Active", d.References[0].TargetPhase)
	assert.Equal(t, "archive", d.References[1].Name)
	assert.True(t, d.References[1].Dangling)
	assert.Empty(t, d.References[1].TargetPhase)

	code, out, stderr = run(t, home, false, "", "describe", "Report", "weekly", "-n", "prod", "-o", "yaml")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "dangling: true")

	// The target deleted (allowDangling: the referrer stays): now both dangle.
	code, _, stderr = run(t, home, false, "", "delete", "Database", "orders", "-n", "prod", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)
	code, out, stderr = run(t, home, false, "", "describe", "Report", "weekly", "-n", "prod")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "  Database/prod/orders  onTargetDelete=allowDangling, dangling (target gone)\n")

	code, _, stderr = run(t, home, false, "", "describe", "Report", "weekly", "-o", "xml")
	assert.Equal(t, exitUsage, code, stderr)
}
