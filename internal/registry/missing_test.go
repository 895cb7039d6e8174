package registry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// countingStore wraps a real store and counts the calls that reach it:
// LIST (List), GET (Open, OpenVersion) and HEAD (Stat). With failList it
// fails every List, as an S3 LIST that times out or is refused does (a
// fake failure: the real bucket cannot be made to fail one call here).
type countingStore struct {
	blobstore.Store
	lists, gets, heads atomic.Int64
	failList           atomic.Bool
}

func (c *countingStore) List(ctx context.Context, prefix string) ([]blobstore.Attributes, error) {
	c.lists.Add(1)
	if c.failList.Load() {
		return nil, errors.New("blobstore: list \"backups/\": 503 SlowDown")
	}
	return c.Store.List(ctx, prefix)
}

func (c *countingStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Store.Open(ctx, key)
}

func (c *countingStore) OpenVersion(ctx context.Context, key string, v blobstore.Version) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Store.OpenVersion(ctx, key, v)
}

func (c *countingStore) Stat(ctx context.Context, key string) (blobstore.Attributes, error) {
	c.heads.Add(1)
	return c.Store.Stat(ctx, key)
}

func (c *countingStore) Check(ctx context.Context) error { return blobstore.Check(ctx, c.Store) }

func (c *countingStore) counts() [3]int64 {
	return [3]int64{c.lists.Load(), c.gets.Load(), c.heads.Load()}
}

func (c *countingStore) reset() { c.lists.Store(0); c.gets.Store(0); c.heads.Store(0) }

// veleroEnv is a registry without plugins over a counting wrapper of the
// env's real file storage.
func veleroEnv(t testing.TB) (*deletiontest.Env, *countingStore, *registry.Registry) {
	e := deletiontest.New(t, deletiontest.Options{})
	cs := &countingStore{Store: e.Blobs}
	reg, err := registry.New(&registry.Config{Store: e.Store, Blobs: cs, Plugins: e.Host})
	require.NoError(t, err)
	return e, cs, reg
}

func storageDir(e *deletiontest.Env) string { return filepath.Join(e.Dir, "storage") }

func writeVelero(t testing.TB, e *deletiontest.Env, names ...string) {
	t.Helper()
	for _, n := range names {
		require.NoError(t, velerotest.WriteDir(storageDir(e), velerotest.Backup(n)))
	}
}

func actions(res []registry.SyncResult) map[string]string {
	out := map[string]string{}
	for _, r := range res {
		out[r.Name] = r.Action
	}
	return out
}

func condition(t *testing.T, e *deletiontest.Env, name string) *catalog.Condition {
	t.Helper()
	r, err := e.Store.Get(context.Background(), backup.Key(name))
	require.NoError(t, err)
	for i := range r.Conditions {
		if r.Conditions[i].Type == backup.ConditionMissingFromStorage {
			return &r.Conditions[i]
		}
	}
	return nil
}

// TestMissingFromStorageOnlyFromAListingThatSucceeded: a backup whose
// folder disappeared from a location that answered gets
// MissingFromStorage, and loses it when the folder is back; a LIST that
// fails, or a file:// folder that is gone (it would list as empty),
// concludes nothing. Only --prune-missing removes a missing backup, with
// an audit entry and a tombstone, and the folder coming back later does
// not re-import it.
func TestMissingFromStorageOnlyFromAListingThatSucceeded(t *testing.T) {
	e, cs, reg := veleroEnv(t)
	ctx := catalog.WithActor(context.Background(), "cli:test")
	writeVelero(t, e, "a", "b", "c")
	res, err := reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": registry.SyncImported, "b": registry.SyncImported, "c": registry.SyncImported}, actions(res))

	// Unknown is not absent: a LIST that fails.
	cs.failList.Store(true)
	_, err = reg.Sync(ctx, registry.SyncOptions{})
	require.ErrorContains(t, err, "503 SlowDown")
	cs.failList.Store(false)
	// ... and a folder that is gone (unmounted): it would list as empty.
	moved := storageDir(e) + ".away"
	require.NoError(t, os.Rename(storageDir(e), moved))
	_, err = reg.Sync(ctx, registry.SyncOptions{PruneMissing: true})
	require.ErrorIs(t, err, blobstore.ErrUnavailable)
	require.NoError(t, os.Rename(moved, storageDir(e)))
	for _, n := range []string{"a", "b", "c"} {
		require.Nil(t, condition(t, e, n), "%s: nothing concluded from a location that could not be read", n)
	}

	// A folder removed behind Lethe's back.
	saved := storageDir(e) + ".b"
	require.NoError(t, os.Rename(filepath.Join(storageDir(e), "backups", "b"), saved))
	res, err = reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, registry.SyncMissing, actions(res)["b"])
	c := condition(t, e, "b")
	require.NotNil(t, c)
	require.Equal(t, "True", c.Status)
	require.Contains(t, c.Message, "backups/b/b.tar.gz is not in")
	require.Nil(t, condition(t, e, "a"))

	// Back again: the condition is cleared.
	require.NoError(t, os.Rename(saved, filepath.Join(storageDir(e), "backups", "b")))
	res, err = reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, registry.SyncFound, actions(res)["b"])
	require.Equal(t, "False", condition(t, e, "b").Status)

	// Gone again; a first --prune-missing only marks it (it was not
	// missing before), the second prunes it, audited.
	require.NoError(t, os.Rename(filepath.Join(storageDir(e), "backups", "b"), saved))
	res, err = reg.Sync(ctx, registry.SyncOptions{PruneMissing: true})
	require.NoError(t, err)
	require.Equal(t, registry.SyncMissing, actions(res)["b"])
	res, err = reg.Sync(ctx, registry.SyncOptions{PruneMissing: true})
	require.NoError(t, err)
	require.Equal(t, registry.SyncPruned, actions(res)["b"])
	_, err = e.Store.Get(ctx, backup.Key("b"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
	ts, err := e.Store.GetTombstone(ctx, backup.Key("b"))
	require.NoError(t, err)
	require.Equal(t, "cli:test", ts.Actor)
	require.Contains(t, ts.Reason, "--prune-missing")
	audit, err := e.Store.ListAudit(ctx, catalog.AuditFilter{Kind: backup.Kind, Name: "b"})
	require.NoError(t, err)
	require.NotEmpty(t, audit)
	require.Contains(t, audit[len(audit)-1].Reason, "--prune-missing")

	// The folder coming back does not bring the pruned backup back.
	require.NoError(t, os.Rename(saved, filepath.Join(storageDir(e), "backups", "b")))
	res, err = reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, registry.SyncSkipped, actions(res)["b"])
	_, err = e.Store.Get(ctx, backup.Key("b"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// TestSyncCostGrowsWithWhatChanged: a sync of a bucket that holds n
// backups already imported, plus one new one, makes one LIST and exactly
// the GETs and HEADs that importing the new one makes into an empty
// bucket: nothing per known backup. The benchmark below measures it at
// 10,000 backups.
func TestSyncCostGrowsWithWhatChanged(t *testing.T) {
	const n = 300
	// The cost of importing one backup into an empty bucket.
	e0, cs0, reg0 := veleroEnv(t)
	writeVelero(t, e0, "new")
	_, err := reg0.Sync(context.Background(), registry.SyncOptions{})
	require.NoError(t, err)
	one := cs0.counts()
	require.Equal(t, int64(1), one[0])

	e, cs, reg := veleroEnv(t)
	for i := range n {
		writeVelero(t, e, fmt.Sprintf("b-%05d", i))
	}
	res, err := reg.Sync(context.Background(), registry.SyncOptions{})
	require.NoError(t, err)
	require.Len(t, res, n)
	// Nothing new: one LIST, nothing else.
	cs.reset()
	_, err = reg.Sync(context.Background(), registry.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, [3]int64{1, 0, 0}, cs.counts(), "LIST, GET, HEAD of a sync where nothing changed")
	// One new backup: what importing it alone costs.
	writeVelero(t, e, "new")
	cs.reset()
	res, err = reg.Sync(context.Background(), registry.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, registry.SyncImported, actions(res)["new"])
	require.Equal(t, one, cs.counts(), "LIST, GET, HEAD of a sync with one new backup among %d", n)
	t.Logf("sync of %d known backups + 1 new: LIST %d, GET %d, HEAD %d", n, one[0], one[1], one[2])
}

// BenchmarkSync10000OneNew is the DESIGN §8 budget: a sync of a
// 10,000-backup bucket with one new backup. It reports the storage calls
// of each sync (LIST, GET, HEAD), which must not grow with the bucket.
func BenchmarkSync10000OneNew(b *testing.B) {
	e, cs, reg := veleroEnv(b)
	for i := range 10000 {
		writeVelero(b, e, fmt.Sprintf("b-%05d", i))
	}
	_, err := reg.Sync(context.Background(), registry.SyncOptions{})
	require.NoError(b, err)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		writeVelero(b, e, fmt.Sprintf("new-%05d", i))
		cs.reset()
		b.StartTimer()
		_, err := reg.Sync(context.Background(), registry.SyncOptions{})
		require.NoError(b, err)
	}
	c := cs.counts()
	b.ReportMetric(float64(c[0]), "LIST/sync")
	b.ReportMetric(float64(c[1]), "GET/sync")
	b.ReportMetric(float64(c[2]), "HEAD/sync")
}

// TestSyncCostOnS3GrowsWithWhatChanged is TestSyncCostGrowsWithWhatChanged
// on S3 (versitygw), counted in HTTP requests by a proxy: a sync with one
// new backup among n makes the LIST pages of the bucket (1,000 keys each)
// and only the GETs of the new backup.
func TestSyncCostOnS3GrowsWithWhatChanged(t *testing.T) {
	if _, err := s3test.FindBinary(); err != nil {
		t.Skip(err)
	}
	const n = 200
	srv := s3test.StartServer(t)
	proxy := s3test.NewProxy(t, srv)
	e := deletiontest.New(t, deletiontest.Options{StorageURL: proxy.URL})
	reg, err := registry.New(&registry.Config{Store: e.Store, Blobs: e.Blobs, Plugins: e.Host})
	require.NoError(t, err)
	put := func(name string) {
		for k, v := range velerotest.Backup(name) {
			require.NoError(t, e.Blobs.Put(context.Background(), k, bytes.NewReader(v)))
		}
	}
	for i := range n {
		put(fmt.Sprintf("b-%05d", i))
	}
	_, err = reg.Sync(context.Background(), registry.SyncOptions{})
	require.NoError(t, err)
	objects, err := e.Blobs.List(context.Background(), "backups/")
	require.NoError(t, err)
	// One more request than the pages: Check, which asks the bucket
	// whether it answers (a one-key listing) before a listing is trusted.
	pages := (len(objects)+999)/1000 + 1

	proxy.Reset()
	_, err = reg.Sync(context.Background(), registry.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, pages, proxy.LISTs(), "LIST pages of a sync where nothing changed")
	require.Empty(t, proxy.GETs(), "GETs of a sync where nothing changed")

	put("new")
	proxy.Reset()
	res, err := reg.Sync(context.Background(), registry.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, registry.SyncImported, actions(res)["new"])
	require.Equal(t, (len(objects)+len(velerotest.Backup("new"))+999)/1000+1, proxy.LISTs())
	require.Len(t, proxy.GETs(), 3, "velero-backup.json, the tarball, the snapshot list: %v", proxy.GETs())
	t.Logf("S3: sync of %d known backups (%d objects) + 1 new: %d LIST pages, %d GETs", n, len(objects), proxy.LISTs(), len(proxy.GETs()))
}
