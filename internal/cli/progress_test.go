package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// runTerminal runs the CLI in process as on a terminal: stderr is one
// (progress shows), stdin is not.
func runTerminal(t *testing.T, home string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, Streams{
		In: strings.NewReader(""), Out: &out, Err: &errb,
		Getenv:         func(k string) string { return map[string]string{"LETHE_HOME": home}[k] },
		InteractiveErr: true,
	}, nil)
	return code, out.String(), errb.String()
}

// TestCascadeCounterCountsBatchPurges: delete --wait on a terminal counts
// every resource the cascade purged, those the collector purged in a
// batch included, and ends on the total.
func TestCascadeCounterCountsBatchPurges(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	require.NoError(t, os.MkdirAll(filepath.Join(home, "plugins"), 0o750))
	ctx := context.Background()
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(home, "lethe.db"), nil)
	require.NoError(t, err)
	root, err := st.Create(ctx, &catalog.Resource{Kind: "App", Name: "root"})
	require.NoError(t, err)
	const n = 300
	var kids []*catalog.Resource
	for i := range n {
		kids = append(kids, &catalog.Resource{Kind: "Volume", Name: fmt.Sprintf("v%d", i), Owners: []catalog.OwnerRef{{UID: root.UID, Kind: "App", Name: "root"}}})
	}
	_, err = st.CreateBatch(ctx, kids)
	require.NoError(t, err)
	require.NoError(t, st.Close())

	code, out, stderr := runTerminal(t, home, "delete", "App", "root", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "App/root: purged")
	counts := regexp.MustCompile(`collecting App/root: (\d+) purged`).FindAllStringSubmatch(stderr, -1)
	require.NotEmpty(t, counts, "%q", stderr)
	require.Equal(t, fmt.Sprint(n+1), counts[len(counts)-1][1], "the counter ends on every resource purged: %q", stderr)
}

// TestProgressOnATerminalOnly: backup create shows a bar while it checks
// and stores the tarball, and backup sync one while it reads the
// listing, on stderr when it is a terminal; not when it is not, nor with
// -o json.
func TestProgressOnATerminalOnly(t *testing.T) {
	home, tarball := newHome(t)
	code, _, stderr := runTerminal(t, home, "backup", "create", "b1", "--from", tarball)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "checking b1")
	require.Contains(t, stderr, "storing b1")
	code, _, stderr = run(t, home, false, "", "backup", "create", "b2", "--from", tarball)
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stderr, "checking")

	found := filepath.Join(home, "storage", "backups", "found", "found.tar.gz")
	require.NoError(t, os.MkdirAll(filepath.Dir(found), 0o750))
	b, err := os.ReadFile(tarball)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(found, b, 0o600))
	code, _, stderr = runTerminal(t, home, "backup", "sync", "--dry-run", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stderr, "syncing", "-o json: no bar")
	code, _, stderr = run(t, home, false, "", "backup", "sync", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stderr, "syncing", "not a terminal: no bar")
	code, out, stderr := runTerminal(t, home, "backup", "sync")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "syncing")
	require.Contains(t, stderr, "/3", "b1, b2 and found")
	require.Contains(t, out, "found")
}

// TestApplyProgressOnALargeInput: apply of a large input shows a bar
// while it reads the catalog, on a terminal; a small one, or -o json,
// none.
func TestApplyProgressOnALargeInput(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	var b strings.Builder
	for i := range applyBarFrom {
		fmt.Fprintf(&b, "---\nkind: Database\nmetadata: {name: db-%d, namespace: shop}\n", i)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte(b.String()), 0o600))
	small := filepath.Join(t.TempDir(), "small.yaml")
	require.NoError(t, os.WriteFile(small, []byte("kind: Database\nmetadata: {name: one, namespace: shop}\n"), 0o600))

	code, _, stderr := runTerminal(t, home, "apply", "-f", small)
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stderr, "reading the catalog")
	code, _, stderr = runTerminal(t, home, "apply", "-f", big, "--dry-run", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stderr, "reading the catalog")
	code, out, stderr := runTerminal(t, home, "apply", "-f", big)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "reading the catalog")
	require.Contains(t, out, fmt.Sprintf("%d created.", applyBarFrom))
}
