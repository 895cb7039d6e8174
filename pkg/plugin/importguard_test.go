package plugin_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// forbiddenImport reports why pkg/ may not import path, or "" when it may.
// pkg/ is Lethe's public SDK: third parties build plugins against it, so it
// must not drag in Lethe's internals, a database driver or the CLI.
func forbiddenImport(path string) string {
	for _, f := range []struct{ prefix, why string }{
		{"github.com/lethehq/lethe/internal", "Lethe's internal packages"},
		{"github.com/lethehq/lethe/cmd", "Lethe's commands"},
		{"github.com/spf13/cobra", "the CLI framework"},
		{"github.com/jackc/pgx", "a database driver"},
		{"github.com/jackc/pgconn", "a database driver"},
		{"github.com/lib/pq", "a database driver"},
		{"modernc.org/sqlite", "a database driver"},
		{"github.com/mattn/go-sqlite3", "a database driver"},
		{"github.com/go-sql-driver/mysql", "a database driver"},
		{"database/sql", "database/sql"},
	} {
		if path == f.prefix || strings.HasPrefix(path, f.prefix+"/") {
			return f.why
		}
	}
	return ""
}

type listedPackage struct {
	ImportPath string
	Imports    []string
	Error      *struct{ Err string }
}

// TestImportGuard fails if any package under pkg/ imports, directly or
// through its dependencies, a package forbiddenImport refuses. It runs
// `go list -deps -json` on pkg/... and reports the import chain.
func TestImportGuard(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the import guard needs the go command")
	const root = "github.com/lethehq/lethe/pkg"
	pkgs := goListDeps(t, goBin, root+"/...")
	imports := map[string][]string{}
	var ours []string
	for _, p := range pkgs {
		if p.Error != nil {
			t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		imports[p.ImportPath] = p.Imports
		if p.ImportPath == root || strings.HasPrefix(p.ImportPath, root+"/") {
			ours = append(ours, p.ImportPath)
		}
	}
	require.NotEmpty(t, ours, "go list found no package under pkg/")
	require.Contains(t, ours, root+"/plugin")

	var violations []string
	for _, p := range ours {
		for _, chain := range forbiddenChains(p, imports) {
			violations = append(violations, strings.Join(chain, " -> ")+" ("+forbiddenImport(chain[len(chain)-1])+")")
		}
	}
	require.Empty(t, violations, "pkg/ is public: it must not import internal/, a database driver or cobra")
}

// forbiddenChains returns, for each forbidden package that from reaches,
// the shortest import chain from from to it.
func forbiddenChains(from string, imports map[string][]string) [][]string {
	parent := map[string]string{from: ""}
	queue := []string{from}
	var out [][]string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if forbiddenImport(p) != "" {
			var chain []string
			for q := p; q != ""; q = parent[q] {
				chain = append([]string{q}, chain...)
			}
			out = append(out, chain)
			continue // no need to look past a forbidden package
		}
		for _, imp := range imports[p] {
			if _, seen := parent[imp]; !seen {
				parent[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return out
}

func TestForbiddenChains(t *testing.T) {
	imports := map[string][]string{
		"m/pkg/a":      {"fmt", "m/pkg/b"},
		"m/pkg/b":      {"github.com/spf13/cobra", "database/sql"},
		"database/sql": {"database/sql/driver"},
	}
	require.ElementsMatch(t, [][]string{
		{"m/pkg/a", "m/pkg/b", "github.com/spf13/cobra"},
		{"m/pkg/a", "m/pkg/b", "database/sql"},
	}, forbiddenChains("m/pkg/a", imports))
	require.Empty(t, forbiddenChains("fmt", imports))
}

func TestForbiddenImport(t *testing.T) {
	for path, forbidden := range map[string]bool{
		"github.com/lethehq/lethe/internal/pluginhost":       true,
		"github.com/lethehq/lethe/internal":                  true,
		"github.com/lethehq/lethe/internalx":                 false,
		"github.com/lethehq/lethe/pkg/plugin":                false,
		"github.com/lethehq/lethe/proto/lethe/plugin/v1":     false,
		"github.com/spf13/cobra":                             true,
		"github.com/spf13/pflag":                             false,
		"github.com/jackc/pgx/v5/stdlib":                     true,
		"modernc.org/sqlite":                                 true,
		"modernc.org/sqlite/lib":                             true,
		"database/sql":                                       true,
		"database/sql/driver":                                true,
		"github.com/hashicorp/go-plugin":                     false,
		"k8s.io/apimachinery/pkg/labels":                     false,
		"github.com/lethehq/lethe/internal/catalog/postgres": true,
	} {
		require.Equal(t, forbidden, forbiddenImport(path) != "", path)
	}
}

// goListDeps runs `go list -deps -json` on the patterns: the packages and
// every package they import, transitively.
func goListDeps(t *testing.T, goBin string, patterns ...string) []listedPackage {
	t.Helper()
	args := append([]string{"list", "-deps", "-json=ImportPath,Imports,Error"}, patterns...)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(goBin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "go list: %s", stderr.String())
	var out []listedPackage
	dec := json.NewDecoder(&stdout)
	for {
		var p listedPackage
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, p)
	}
}
