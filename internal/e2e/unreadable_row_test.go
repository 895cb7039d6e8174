package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOneUnreadableBackupRowDoesNotBreakTheList: a backup row whose spec
// is not an object (written into the catalog by hand) is left out of
// `backup list`, with one warning line naming it; the other backups are
// listed and the command succeeds, in every format.
func TestOneUnreadableBackupRowDoesNotBreakTheList(t *testing.T) {
	forgeCatalogs(t, func(t *testing.T, e *env, forge func(string, func(map[string]any))) {
		e.create("good", 3)
		e.create("bad", 3)
		forge("bad", func(doc map[string]any) { doc["spec"] = "not an object" })
		for _, o := range []string{"table", "wide", "json", "yaml"} {
			r := e.ok("backup", "list", "-o", o)
			require.Contains(t, r.stdout, "good", "%s", r)
			require.NotContains(t, r.stdout, "bad", "%s", r)
			require.Equal(t, "Warning: left out of the list: backup bad: spec: json: cannot unmarshal string into Go value of type backup.Spec\n", r.stderr, "%s", r)
		}
		r := e.ok("backup", "get")
		require.Contains(t, r.stdout, "good", "%s", r)
		require.Equal(t, 1, strings.Count(r.stderr, "Warning: left out of the list"), "%s", r)
	})
}
