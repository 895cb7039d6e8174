package catalogtest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testForcedPurgeAuditsExactlyTheFinalizersItSkipped: a forced purge
// that skips finalizers audits them (§10: --force is audited), with the
// caller's details beside them, and only the caller's details when it
// skipped none, so the audit says what the force did and nothing else.
func testForcedPurgeAuditsExactlyTheFinalizersItSkipped(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	forced := func(name string, finalizers []string, details string) string {
		t.Helper()
		r := f.create(t, res("Backup", "ns", name, nil))
		_, err := f.s.Delete(f.ctx, r.Key(), catalog.DeleteOptions{Finalizers: finalizers})
		require.NoError(t, err)
		opts := catalog.PurgeOptions{Force: true}
		if details != "" {
			opts.Details = json.RawMessage(details)
		}
		require.NoError(t, f.s.Purge(f.ctx, r.Key(), opts))
		audit, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r.UID})
		require.NoError(t, err)
		require.NotEmpty(t, audit)
		last := audit[len(audit)-1]
		require.Equal(t, "force-purge", last.Action)
		return string(last.Details)
	}
	require.JSONEq(t, `{"remainingFinalizers":["a/x","b/y"],"details":{"plugins":1}}`,
		forced("skips-two", []string{"a/x", "b/y"}, `{"plugins":1}`))
	require.JSONEq(t, `{"remainingFinalizers":["a/x"]}`, forced("skips-one", []string{"a/x"}, ""))
	require.JSONEq(t, `{"plugins":1}`, forced("skips-none", nil, `{"plugins":1}`))
}
