package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/lethehq/lethe/internal/catalog"
)

// onCatalogs runs f on an env whose catalog is the home's SQLite file,
// then on one whose catalog is a fresh PostgreSQL database (when
// LETHE_TEST_POSTGRES_URL is set), with a way to run SQL on that
// database directly (what an earlier Lethe, which did not refuse every
// cycle, could have stored).
func onCatalogs(t *testing.T, f func(t *testing.T, e *env, raw func(sql string, args ...any))) {
	t.Run("sqlite", func(t *testing.T) {
		e := newEnv(t)
		f(t, e, func(q string, args ...any) {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(e.home, "lethe.db")+"?_pragma=busy_timeout(10000)")
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Exec(q, args...)
			require.NoError(t, err)
		})
	})
	t.Run("postgres", func(t *testing.T) {
		admin := os.Getenv("LETHE_TEST_POSTGRES_URL")
		if admin == "" {
			t.Skip("set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
		}
		store := createDatabase(t, admin)
		e := newEnv(t)
		e.extra = append(e.extra, "LETHE_STORE="+store)
		e.ok("migrate")
		f(t, e, func(q string, args ...any) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, store)
			require.NoError(t, err)
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, q, args...)
			require.NoError(t, err)
		})
	})
}

// storeBlockReference gives kind/name a block reference to kind/target,
// straight in the database.
func storeBlockReference(t *testing.T, e *env, raw func(string, ...any), kind, name, target string) {
	t.Helper()
	r := e.ok("get", kind, name, "-o", "json")
	// get -o json prints the resource's object (docs/output.md); the
	// database holds the catalog's row.
	var o struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name              string             `json:"name"`
			Namespace         string             `json:"namespace"`
			UID               string             `json:"uid"`
			ResourceVersion   int64              `json:"resourceVersion"`
			CreationTimestamp time.Time          `json:"creationTimestamp"`
			Labels            map[string]string  `json:"labels"`
			Annotations       map[string]string  `json:"annotations"`
			OwnerReferences   []catalog.OwnerRef `json:"ownerReferences"`
			Finalizers        []string           `json:"finalizers"`
		} `json:"metadata"`
		References []catalog.Reference `json:"references"`
		Spec       json.RawMessage     `json:"spec"`
		Status     json.RawMessage     `json:"status"`
		Lifecycle  struct {
			Phase     catalog.Phase `json:"phase"`
			UpdatedAt time.Time     `json:"updatedAt"`
		} `json:"lifecycle"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &o))
	require.Equal(t, catalog.PhaseActive, o.Lifecycle.Phase)
	m := o.Metadata
	doc := catalog.Resource{Kind: o.Kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID, Labels: m.Labels, Annotations: m.Annotations,
		Owners: m.OwnerReferences, References: o.References, Finalizers: m.Finalizers, Phase: o.Lifecycle.Phase,
		Spec: o.Spec, Status: o.Status, ResourceVersion: m.ResourceVersion, CreatedAt: m.CreationTimestamp, UpdatedAt: o.Lifecycle.UpdatedAt}
	doc.References = append(doc.References, catalog.Reference{Kind: kind, Name: target, OnTargetDelete: catalog.RefBlock})
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	uid := m.UID
	require.NotEmpty(t, uid)
	raw(`UPDATE resources SET doc = $1 WHERE uid = $2`, string(b), uid)
	raw(`INSERT INTO reference_edges (target_kind, target_namespace, target_name, referrer_uid, on_target_delete) VALUES ($1, '', $2, $3, 'block')`, kind, target, uid)
}

// TestCyclesThroughTheBinary: apply refuses a cycle of any edges with
// one line naming it; a cycle stored anyway (by an earlier Lethe) is
// shown blocked by the dry run, and delete --wait returns exit 3 with
// the cycle, printed once; explain names it; the audit log has one
// deletion-cycle entry; a delete on a cycle of block references is
// refused naming the cycle.
func TestCyclesThroughTheBinary(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, raw func(string, ...any)) {
		// x blocks y, and y is owned by x with blockOwnerDeletion.
		mixed := e.writeFile("mixed.yaml", "kind: Node\nmetadata: {name: x}\nreferences: [{kind: Node, name: y, onTargetDelete: block}]\n---\n"+
			"kind: Node\nmetadata: {name: y, ownerReferences: [{kind: Node, name: x, blockOwnerDeletion: true}]}\n")
		r := e.run("apply", "-f", mixed)
		require.NotEqual(t, 0, r.code, "%s", r)
		require.Contains(t, r.stderr, "cycle: Node/x owns Node/y; Node/x holds a block reference to Node/y", "%s", r)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %s", r)
		require.Equal(t, 4, e.run("get", "Node", "x").code, "nothing applied")
		blocks := e.writeFile("blocks.yaml", "kind: R\nmetadata: {name: r1}\nreferences: [{kind: R, name: r2, onTargetDelete: block}]\n---\n"+
			"kind: R\nmetadata: {name: r2}\nreferences: [{kind: R, name: r1, onTargetDelete: block}]\n")
		r = e.run("apply", "-f", blocks)
		require.NotEqual(t, 0, r.code, "%s", r)
		require.Contains(t, r.stderr, "cycle: R/r2 holds a block reference to R/r1; R/r1 holds a block reference to R/r2", "%s", r)

		// Stored anyway.
		e.ok("apply", "-f", e.writeFile("pair.yaml", "kind: Node\nmetadata: {name: x}\n---\n"+
			"kind: Node\nmetadata: {name: y, ownerReferences: [{kind: Node, name: x, blockOwnerDeletion: true}]}\n"))
		storeBlockReference(t, e, raw, "Node", "x", "y")
		const want = "cycle: Node/x owns Node/y; Node/x holds a block reference to Node/y: none of them can be purged before the others"

		r = e.ok("delete", "Node", "x", "--dry-run")
		require.Contains(t, r.stdout, "1 blocked", "%s", r)
		require.Contains(t, r.stdout, want, "%s", r)

		r = e.run("delete", "Node", "x", "--yes", "--wait")
		require.Equal(t, 3, r.code, "%s", r)
		require.Contains(t, r.stdout, "Node/x is stuck", "%s", r)
		require.Equal(t, 1, strings.Count(r.stdout, want), "the cycle printed once: %s", r)
		// Again: the same answer, nothing more written.
		r = e.run("delete", "Node", "y", "--yes", "--wait")
		require.Equal(t, 3, r.code, "%s", r)
		require.Contains(t, r.stdout, want, "%s", r)

		r = e.ok("explain", "Node", "y")
		require.Contains(t, r.stdout, want, "%s", r)
		r = e.ok("get", "Node", "x", "-o", "json")
		require.Contains(t, r.stdout, `"reason": "Cycle"`, "%s", r)
		r = e.ok("audit", "-o", "json")
		require.Equal(t, 1, strings.Count(r.stdout, `"deletion-cycle"`), "one audit entry for the cycle: %s", r)

		// A cycle of block references alone, stored anyway.
		e.ok("apply", "-f", e.writeFile("refs.yaml", "kind: R\nmetadata: {name: r1}\n---\n"+
			"kind: R\nmetadata: {name: r2}\nreferences: [{kind: R, name: r1, onTargetDelete: block}]\n"))
		storeBlockReference(t, e, raw, "R", "r1", "r2")
		r = e.run("delete", "R", "r1", "--yes", "--wait")
		require.Equal(t, 5, r.code, "%s", r)
		require.Contains(t, r.stderr, "cycle: R/r2 holds a block reference to R/r1; R/r1 holds a block reference to R/r2", "%s", r)
	})
}

// TestGotenTargetWaitsForItsReferrersThroughTheBinary: Goten's scenario
// as a user runs it: A is deleted; B and C hold cascade references to
// it; D blocks C. delete --wait returns exit 3 with the chain A → C → D;
// explain on A answers "why is A not gone?"; once D goes, A is purged.
func TestGotenTargetWaitsForItsReferrersThroughTheBinary(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, _ func(string, ...any)) {
		e.ok("apply", "-f", e.writeFile("goten.yaml", "kind: Account\nmetadata: {name: a}\n---\n"+
			"kind: Project\nmetadata: {name: b}\nreferences: [{kind: Account, name: a, onTargetDelete: cascade}]\n---\n"+
			"kind: Project\nmetadata: {name: c}\nreferences: [{kind: Account, name: a, onTargetDelete: cascade}]\n---\n"+
			"kind: Restore\nmetadata: {name: d}\nreferences: [{kind: Project, name: c, onTargetDelete: block}]\n"))
		r := e.run("delete", "Account", "a", "--yes", "--wait")
		require.Equal(t, 3, r.code, "%s", r)
		require.Contains(t, r.stdout, "Account/a (Deleting) [stuck]", "%s", r)
		require.Contains(t, r.stdout, "└─ Project/c (Deleting) [stuck]: holds a cascade reference to Account/a", "%s", r)
		require.Contains(t, r.stdout, "└─ Restore/d (Active) [stuck]", "%s", r)
		require.Equal(t, 4, e.run("get", "Project", "b").code, "B is purged")
		r = e.ok("explain", "Account", "a")
		require.Contains(t, r.stdout, "Restore/d (Active) [stuck]", "%s", r)
		r = e.ok("get", "Account", "a", "-o", "json")
		require.Contains(t, r.stdout, `"reason": "CascadeReferrerStuck"`, "%s", r)
		e.ok("delete", "Restore", "d", "--yes", "--wait")
		r = e.ok("delete", "Account", "a", "--yes", "--wait")
		require.Contains(t, r.stdout, "Account/a: purged", "%s", r)
		require.Equal(t, 4, e.run("get", "Project", "c").code, "C is purged")
	})
}

// TestDeleteFileResumes: rerunning `lethe delete -f` after a run that
// did part of the work (here: --async left both resources Deleting, and
// one was purged since) finishes it: the resource already Deleting is
// driven, the one already purged counts as done and is reported so.
func TestDeleteFileResumes(t *testing.T) {
	onCatalogs(t, func(t *testing.T, e *env, _ func(string, ...any)) {
		shop := e.writeFile("shop.yaml", "kind: Volume\nmetadata: {name: data, namespace: shop}\n---\n"+
			"kind: Restore\nmetadata: {name: r, namespace: shop}\nreferences: [{kind: Volume, namespace: shop, name: data, onTargetDelete: block}]\n")
		e.ok("apply", "-f", shop)
		e.ok("delete", "-f", shop, "--yes", "--async")
		e.ok("delete", "Restore", "r", "-n", "shop", "--yes", "--wait")
		r := e.ok("delete", "-f", shop, "--dry-run")
		require.Contains(t, r.stdout, "Restore/shop/r: already purged at", "%s", r)
		r = e.run("delete", "-f", shop, "--yes", "--wait")
		require.Equal(t, 0, r.code, "%s", r)
		require.Contains(t, r.stdout, "Restore/shop/r: purged; already purged at", "%s", r)
		require.Contains(t, r.stdout, "Volume/shop/data: purged", "%s", r)
		require.Equal(t, 4, e.run("get", "Volume", "data", "-n", "shop").code)
		// A resource that never existed is still an error (exit 4).
		r = e.run("delete", "-f", e.writeFile("ghost.yaml", "kind: Volume\nmetadata: {name: ghost, namespace: shop}\n"), "--yes")
		require.Equal(t, 4, r.code, "%s", r)
	})
}
