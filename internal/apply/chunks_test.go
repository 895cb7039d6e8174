package apply_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
)

// filler is n ConfigMaps without owners or references: more than one
// chunk of the plan.
func filler(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\nkind: ConfigMap\nmetadata: {name: cm-%04d, namespace: prod}\nspec: {v: a}\n", i)
	}
	return b.String()
}

// TestApplyPlansForwardOwnersAcrossChunks: the plan goes a chunk at a
// time, and a document whose owner or cascade target comes chunks later
// in the input is held back until they are planned: it is applied as if
// the input were planned whole (the owner's uid, the target found), dry
// run or not. A cycle whose ends are chunks apart is refused, dry run
// included.
func TestApplyPlansForwardOwnersAcrossChunks(t *testing.T) {
	const dependent = "---\nkind: Volume\nmetadata:\n  name: vol\n  namespace: prod\n  ownerReferences: [{kind: Database, name: orders}]\n" +
		"references: [{kind: Zone, name: eu-1, onTargetDelete: cascade}]\n" +
		"---\nkind: Disk\nmetadata: {name: d, namespace: prod}\nreferences: [{kind: Zone, name: eu-1, onTargetDelete: cascade}]\n"
	const later = "---\nkind: Database\nmetadata: {name: orders, namespace: prod}\n---\nkind: Zone\nmetadata: {name: eu-1}\n"
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		text := dependent + filler(1100) + later
		res, err := e.Apply(ctx, docs(t, text), apply.Options{DryRun: true, TakeDocuments: true})
		require.NoError(t, err)
		assert.Equal(t, "1104 created", res.Summary())
		res, err = e.Apply(ctx, docs(t, text), apply.Options{TakeDocuments: true})
		require.NoError(t, err)
		assert.Equal(t, "1104 created", res.Summary())
		vol := get(t, st, "Volume", "prod", "vol")
		require.Len(t, vol.Owners, 1)
		assert.Equal(t, get(t, st, "Database", "prod", "orders").UID, vol.Owners[0].UID)
		assert.Equal(t, "Volume", res.Changes[0].Kind, "the report keeps the input's order")
		assert.Equal(t, "eu-1", get(t, st, "Disk", "prod", "d").References[0].Name)

		cycle := "---\nkind: Node\nmetadata: {name: a, ownerReferences: [{kind: Node, name: b}]}\n" + filler(1100) +
			"---\nkind: Node\nmetadata: {name: b, ownerReferences: [{kind: Node, name: a}]}\n"
		for _, dry := range []bool{true, false} {
			_, err := e.Apply(ctx, docs(t, cycle), apply.Options{DryRun: dry, TakeDocuments: true})
			require.ErrorIs(t, err, catalog.ErrCycle, "dry run %v", dry)
		}
		_, err = st.Get(ctx, catalog.Key{Kind: "Node", Name: "a"})
		require.ErrorIs(t, err, catalog.ErrNotFound)
	})
}
