package catalogtest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

// testUpdateAuditsWhatChangedAndNotANoop: an update's audit entry names
// the fields it changed (an update keeps the phase, so "update
// Deleting→Deleting" alone says nothing); an update that changes nothing
// (a spec written in another key order included) is neither written nor
// audited, and does not bump the version. The same for WriteEach.
func testUpdateAuditsWhatChangedAndNotANoop(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	in := res("Backup", "", "b", map[string]string{"x": "1"})
	in.Spec = json.RawMessage(`{"a":1,"b":{"c":[1,2]}}`)
	in.Finalizers = []string{"example.com/f"}
	r := f.create(t, in)
	r, err := f.s.Delete(f.ctx, r.Key(), catalog.DeleteOptions{Reason: "test"})
	require.NoError(t, err)
	f.clock.Advance(time.Minute)
	entries := func() []catalog.AuditEntry {
		t.Helper()
		es, err := f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: r.UID})
		require.NoError(t, err)
		return es
	}
	before := len(entries())

	same := *r
	same.Spec = json.RawMessage(`{"b":{"c":[1,2]},"a":1}`)
	got, err := f.s.Update(f.ctx, &same)
	require.NoError(t, err)
	assert.Equal(t, r.ResourceVersion, got.ResourceVersion, "a no-op update is not written")
	assert.Len(t, entries(), before, "a no-op update is not audited")

	upd := *got
	upd.Status = json.RawMessage(`{"deletion":{"processed":3}}`)
	upd.Conditions = []catalog.Condition{{Type: "DeletionStuck", Status: "False", LastTransitionTime: f.clock.Now()}}
	got, err = f.s.Update(f.ctx, &upd)
	require.NoError(t, err)
	assert.Greater(t, got.ResourceVersion, r.ResourceVersion)
	es := entries()
	require.Len(t, es, before+1)
	last := es[len(es)-1]
	assert.Equal(t, "update", last.Action)
	assert.Equal(t, catalog.PhaseDeleting, last.FromPhase)
	assert.Equal(t, "changed: status, conditions", last.Reason)

	// WriteEach (apply's write) names what changed too.
	a, err := f.s.Create(f.ctx, res("Database", "", "orders", map[string]string{"team": "db"}))
	require.NoError(t, err)
	a.Labels = map[string]string{"team": "web"}
	a.Spec = json.RawMessage(`{"size":1}`)
	require.NoError(t, f.s.WriteEach(f.ctx, 1, func(int) (catalog.Write, error) { return catalog.Write{Resource: a}, nil }, func(int, *catalog.Resource) {}))
	es, err = f.s.ListAudit(f.ctx, catalog.AuditFilter{UID: a.UID})
	require.NoError(t, err)
	require.NotEmpty(t, es)
	assert.Equal(t, "changed: labels, spec", es[len(es)-1].Reason)
}
