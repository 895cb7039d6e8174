package apply_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/apply"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/catalogtest"
)

// backupDoc is the document get prints of the stored backup r: its spec
// and status as the backup engine writes them (every field, zero ones
// included), which a record written sparsely does not hold as such.
func backupDoc(t *testing.T, r *catalog.Resource, labels string) string {
	t.Helper()
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.NoError(t, b.Encode())
	return "apiVersion: lethe.io/v1\nkind: Backup\nmetadata: {name: " + r.Name + ", uid: " + r.UID + ", labels: " + labels +
		"}\nspec: " + string(b.Resource.Spec) + "\nstatus: " + string(b.Resource.Status) + "\nlifecycle: {phase: Active}\n"
}

// TestApplyTakesBackAnUnchangedBackupAndRefusesAnyChangeToIt: a Backup's
// document that is the stored backup is unchanged, and nothing is
// written; one that differs in any field (its labels too: the backup
// engine sets them at registration) is a ReadOnlyError naming the field,
// and nothing of the apply is written.
func TestApplyTakesBackAnUnchangedBackupAndRefusesAnyChangeToIt(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		// Stored sparsely, in another order than the engine writes it.
		r, err := st.Create(ctx, &catalog.Resource{Kind: backup.Kind, Name: "b1", Labels: map[string]string{"team": "db"},
			Spec: json.RawMessage(`{"storageKey":"backups/b1/b1.tar.gz","items":3}`)})
		require.NoError(t, err)
		same := backupDoc(t, r, "{team: db}")
		for _, dry := range []bool{true, false} {
			v := version(t, st)
			res, err := e.Apply(ctx, docs(t, same), apply.Options{DryRun: dry})
			require.NoError(t, err, same)
			assert.Equal(t, map[string]apply.Action{"Backup/b1": apply.Unchanged}, actions(res))
			assert.Equal(t, v, version(t, st))
		}
		var spec map[string]any
		require.NoError(t, json.Unmarshal(r.Spec, &spec))
		for _, tc := range []struct{ name, doc, field string }{
			{"labels", backupDoc(t, r, "{team: web}"), "metadata.labels"},
			{"no labels", backupDoc(t, r, "{}"), "metadata.labels"},
			{"spec", "kind: Backup\nmetadata: {name: b1, labels: {team: db}}\nspec: {storageKey: backups/b1/b1.tar.gz, items: 4}\n", "spec"},
			{"status", "kind: Backup\nmetadata: {name: b1, labels: {team: db}}\nspec: {storageKey: backups/b1/b1.tar.gz, items: 3}\nstatus: {phase: x}\n", "status"},
			{"finalizers", "kind: Backup\nmetadata: {name: b1, labels: {team: db}, finalizers: [example.com/x]}\nspec: {storageKey: backups/b1/b1.tar.gz, items: 3}\n", "metadata.finalizers"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				v := version(t, st)
				// A database beside it, which apply could write, is not written either.
				_, err := e.Apply(ctx, docs(t, "kind: Database\nmetadata: {name: orders}\n---\n"+tc.doc), apply.Options{})
				var ro *apply.ReadOnlyError
				require.ErrorAs(t, err, &ro)
				assert.Contains(t, err.Error(), "app.yaml, document 2 (Backup/b1): "+tc.field+": apply cannot change a Backup's "+tc.field)
				assert.Contains(t, err.Error(), "nothing was applied")
				assert.Equal(t, v, version(t, st))
			})
		}
		// No status in the document leaves the status alone (as for any
		// kind): unchanged.
		res, err := e.Apply(ctx, docs(t, "kind: Backup\nmetadata: {name: b1, labels: {team: db}}\nspec: {storageKey: backups/b1/b1.tar.gz, items: 3}\n"), apply.Options{})
		require.NoError(t, err)
		assert.Equal(t, apply.Unchanged, res.Changes[0].Action)
	})
}

// TestApplyTakesBackAnUnchangedMemberAloneAndRefusesAnyChangeToIt: a
// bundle member given on its own, as get prints it, is unchanged (its
// bundle named in the report); a document that differs from it in
// anything its bundle owns is a ReadOnlyError naming the field, dry run
// included, and nothing is written.
func TestApplyTakesBackAnUnchangedMemberAloneAndRefusesAnyChangeToIt(t *testing.T) {
	backends(t, func(t *testing.T, st catalog.Store, clock *catalogtest.Clock) {
		e := newEngine(t, st, clock)
		_, err := e.Apply(ctx, docs(t, bundle("shop", "{v: 1}", "web")), apply.Options{})
		require.NoError(t, err)
		b := get(t, st, "Bundle", "", "shop")
		web := get(t, st, "Service", "shop", "web")
		doc := func(owners, spec string) string {
			return "kind: Service\nmetadata: {name: web, namespace: shop, uid: " + web.UID + ", ownerReferences: " + owners + "}\nspec: " + spec + "\n"
		}
		owner := "[{kind: Bundle, name: shop, uid: " + b.UID + ", blockOwnerDeletion: true}]"
		for _, d := range []string{doc(owner, "{v: 1}"), doc("[{kind: Bundle, name: shop, blockOwnerDeletion: true}]", "{v: 1}")} {
			v := version(t, st)
			res, err := e.Apply(ctx, docs(t, d), apply.Options{})
			require.NoError(t, err, d)
			require.Len(t, res.Changes, 1)
			assert.Equal(t, apply.Unchanged, res.Changes[0].Action)
			assert.Equal(t, "Bundle/shop", res.Changes[0].Bundle)
			assert.Equal(t, v, version(t, st))
		}
		for _, tc := range []struct{ name, doc, field string }{
			{"spec", doc(owner, "{v: 2}"), "spec"},
			{"without its owner", doc("[]", "{v: 1}"), "metadata.ownerReferences"},
			{"another owner uid", doc("[{kind: Bundle, name: shop, uid: "+web.UID+", blockOwnerDeletion: true}]", "{v: 1}"), "metadata.ownerReferences"},
			{"labels", "kind: Service\nmetadata: {name: web, namespace: shop, labels: {a: b}, ownerReferences: " + owner + "}\nspec: {v: 1}\n", "metadata.labels"},
			{"annotations", "kind: Service\nmetadata: {name: web, namespace: shop, annotations: {a: b}, ownerReferences: " + owner + "}\nspec: {v: 1}\n", "metadata.annotations"},
			{"references", doc(owner, "{v: 1}") + "references: [{kind: Zone, name: z, onTargetDelete: allowDangling}]\n", "references"},
		} {
			for _, dry := range []bool{true, false} {
				v := version(t, st)
				_, err := e.Apply(ctx, docs(t, tc.doc), apply.Options{DryRun: dry})
				var ro *apply.ReadOnlyError
				require.ErrorAs(t, err, &ro, tc.name)
				assert.Contains(t, err.Error(), "app.yaml, document 1 (Service/shop/web): "+tc.field+": Service/shop/web is a member of Bundle/shop, which owns its "+tc.field+": change it through its bundle", tc.name)
				assert.Equal(t, v, version(t, st))
			}
		}
	})
}
