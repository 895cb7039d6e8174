package gc_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/pluginhost"
)

// recorderBin is the deletion pipeline's test plugin binary (real
// subprocess plugins: test.lethe.io/a-first, b-second, c-pods), built once.
var recorderBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lethe-gc-test-")
	if err != nil {
		panic(err)
	}
	recorderBin = filepath.Join(dir, "recorder")
	if err := deletiontest.Build(recorderBin, "../deletion/testdata/recorder"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// drivers runs f on SQLite, and on PostgreSQL when LETHE_TEST_POSTGRES_URL
// is set (each test in a schema of its own).
func onDrivers(t *testing.T, f func(t *testing.T, st catalog.Store)) {
	onDriversAt(t, nil, f)
}

// onDriversAt is onDrivers with the catalog's clock (nil: the real one).
func onDriversAt(t *testing.T, now func() time.Time, f func(t *testing.T, st catalog.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "c.db")
		st, err := drivers.Open(context.Background(), "sqlite://"+path, &catalog.Config{PollInterval: 10 * time.Millisecond, Now: now})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		rawExec.Store(st, func(t *testing.T, stmts ...rawStmt) {
			db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
			require.NoError(t, err)
			defer db.Close()
			for _, s := range stmts {
				_, err := db.Exec(s.sql, s.args...)
				require.NoError(t, err)
			}
		})
		f(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		url := os.Getenv("LETHE_TEST_POSTGRES_URL")
		if url == "" {
			t.Skip("PostgreSQL tests are off: set LETHE_TEST_POSTGRES_URL")
		}
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		schema := "lethe_gc_test_" + hex.EncodeToString(b)
		t.Cleanup(func() {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
			require.NoError(t, err)
		})
		st, err := drivers.Open(context.Background(), url, &catalog.Config{Schema: schema, PollInterval: 10 * time.Millisecond, Now: now})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		rawExec.Store(st, func(t *testing.T, stmts ...rawStmt) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, `SET search_path TO `+pgx.Identifier{schema}.Sanitize())
			require.NoError(t, err)
			for _, s := range stmts {
				_, err := conn.Exec(ctx, s.sql, s.args...)
				require.NoError(t, err)
			}
		})
		f(t, st)
	})
}

type rawStmt struct {
	sql  string
	args []any
}

// rawExec holds, per store, statements run on its database directly.
var rawExec sync.Map // catalog.Store → func(*testing.T, ...rawStmt)

// storeAnyway writes r's document and edges straight into the database,
// past the catalog's checks: a catalog written by an earlier Lethe, which
// did not refuse every cycle.
func (f *fixture) storeAnyway(r *catalog.Resource) {
	f.t.Helper()
	exec, ok := rawExec.Load(f.st)
	require.True(f.t, ok)
	doc, err := json.Marshal(r)
	require.NoError(f.t, err)
	stmts := []rawStmt{
		{`UPDATE resources SET doc = $1 WHERE uid = $2`, []any{string(doc), r.UID}},
		{`DELETE FROM owner_edges WHERE dependent_uid = $1`, []any{r.UID}},
		{`DELETE FROM reference_edges WHERE referrer_uid = $1`, []any{r.UID}},
	}
	for _, o := range r.Owners {
		stmts = append(stmts, rawStmt{`INSERT INTO owner_edges (owner_uid, dependent_uid, block_owner_deletion) VALUES ($1, $2, $3)`, []any{o.UID, r.UID, o.BlockOwnerDeletion}})
	}
	for _, ref := range r.References {
		stmts = append(stmts, rawStmt{`INSERT INTO reference_edges (target_kind, target_namespace, target_name, referrer_uid, on_target_delete) VALUES ($1, $2, $3, $4, $5)`,
			[]any{ref.Kind, ref.Namespace, ref.Name, r.UID, string(ref.OnTargetDelete)}})
	}
	exec.(func(*testing.T, ...rawStmt))(f.t, stmts...)
}

// fixture is a catalog, a collector and helpers.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	st     catalog.Store
	c      *gc.Collector
	record string
	locks  string
	// skew moves the collector's clock on (retry times).
	skew *atomic.Int64
}

func newFixture(t *testing.T, st catalog.Store, withPlugins bool) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: catalog.WithActor(context.Background(), "test"), st: st, skew: new(atomic.Int64)}
	cfg := gc.Config{Store: st, NoPlugins: true, Now: func() time.Time { return time.Now().Add(time.Duration(f.skew.Load())) }, PollInterval: 50 * time.Millisecond, Recheck: time.Hour, LeaseTTL: 5 * time.Second}
	if withPlugins {
		cfg.Plugins, cfg.NoPlugins = f.plugins(), false
	}
	c, err := gc.New(cfg)
	require.NoError(t, err)
	f.c = c
	return f
}

// plugins starts the recorder plugin binary (real subprocesses), writing
// to f.record and controlled by the files of f.locks.
func (f *fixture) plugins() gc.Plugins {
	t := f.t
	dir := t.TempDir()
	f.record, f.locks = filepath.Join(dir, "record.tsv"), filepath.Join(dir, "locks")
	require.NoError(t, os.MkdirAll(f.locks, 0o750))
	pdir := filepath.Join(dir, "plugins")
	require.NoError(t, os.MkdirAll(pdir, 0o750))
	require.NoError(t, os.Link(recorderBin, filepath.Join(pdir, "recorder")))
	h, err := pluginhost.New(&pluginhost.Config{Dir: pdir, PluginEnv: map[string]map[string]string{
		"recorder": {"LETHE_RECORD_FILE": f.record, "LETHE_RECORD_CONTROL_DIR": f.locks},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return gc.HostPlugins(h)
}

// res creates a resource in namespace "prod".
func (f *fixture) res(kind, name string, mods ...func(*catalog.Resource)) *catalog.Resource {
	f.t.Helper()
	r := &catalog.Resource{Kind: kind, Namespace: "prod", Name: name}
	for _, m := range mods {
		m(r)
	}
	out, err := f.st.Create(f.ctx, r)
	require.NoError(f.t, err)
	return out
}

func ownedBy(o *catalog.Resource, block bool) func(*catalog.Resource) {
	return func(r *catalog.Resource) {
		r.Owners = append(r.Owners, catalog.OwnerRef{UID: o.UID, Kind: o.Kind, Name: o.Name, BlockOwnerDeletion: block})
	}
}

func refTo(t *catalog.Resource, policy catalog.OnTargetDelete) func(*catalog.Resource) {
	return func(r *catalog.Resource) {
		r.References = append(r.References, catalog.Reference{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name, OnTargetDelete: policy})
	}
}

func finalizer(name string) func(*catalog.Resource) {
	return func(r *catalog.Resource) { r.Finalizers = append(r.Finalizers, name) }
}

// del requests the deletion of r and drives the collector in process.
func (f *fixture) del(r *catalog.Resource, prop gc.Propagation) gc.Outcome {
	f.t.Helper()
	_, err := f.c.Delete(f.ctx, r.Key(), gc.DeleteOptions{Propagation: prop})
	require.NoError(f.t, err)
	return f.drive(r)
}

func (f *fixture) drive(r *catalog.Resource) gc.Outcome {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 60*time.Second)
	defer cancel()
	out, err := f.c.Drive(ctx, r.Key(), gc.DriveOptions{})
	require.NoError(f.t, err)
	return out
}

func (f *fixture) get(r *catalog.Resource) *catalog.Resource {
	f.t.Helper()
	x, err := f.st.Get(f.ctx, r.Key())
	require.NoError(f.t, err)
	return x
}

func (f *fixture) requirePurged(rs ...*catalog.Resource) {
	f.t.Helper()
	for _, r := range rs {
		_, err := f.st.Get(f.ctx, r.Key())
		require.ErrorIs(f.t, err, catalog.ErrNotFound, "%s should be purged", r.Key())
		ts, err := f.st.GetTombstone(f.ctx, r.Key())
		require.NoError(f.t, err)
		require.Equal(f.t, r.UID, ts.UID)
	}
}

func (f *fixture) requirePhase(r *catalog.Resource, p catalog.Phase) *catalog.Resource {
	f.t.Helper()
	x := f.get(r)
	require.Equal(f.t, p, x.Phase, "%s", r.Key())
	return x
}

// purgeOrder returns the audit ids of the purges, by UID.
func (f *fixture) purgeOrder() map[string]int64 {
	f.t.Helper()
	es, err := f.st.ListAudit(f.ctx, catalog.AuditFilter{})
	require.NoError(f.t, err)
	out := map[string]int64{}
	for _, e := range es {
		if e.Action == "purge" || e.Action == "force-purge" {
			_, dup := out[e.UID]
			require.False(f.t, dup, "%s/%s purged twice", e.Kind, e.Name)
			out[e.UID] = e.ID
		}
	}
	return out
}

func stuck(r *catalog.Resource) *catalog.Condition {
	for i := range r.Conditions {
		if r.Conditions[i].Type == gc.ConditionStuck && r.Conditions[i].Status == "True" {
			return &r.Conditions[i]
		}
	}
	return nil
}
