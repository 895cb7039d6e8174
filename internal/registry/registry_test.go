package registry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/registry"
)

// recorderBin is the deletion tests' recorder plugin, built once: it
// serves test.lethe.io/a-first and b-second (every item), c-pods (pods)
// and, with LETHE_RECORD_LABELLED, d-labelled (label tier=db).
var recorderBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lethe-registry-test-")
	if err != nil {
		panic(err)
	}
	recorderBin = filepath.Join(dir, "recorder")
	if err := deletiontest.Build(recorderBin, "../deletion/testdata/recorder"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const (
	pluginA = "test.lethe.io/a-first"
	pluginB = "test.lethe.io/b-second"
	pluginC = "test.lethe.io/c-pods"
	pluginD = "test.lethe.io/d-labelled"
)

// newEnv is a real SQLite catalog, a file storage folder and, unless
// plugins is false, the recorder plugin running as a subprocess.
func newEnv(t *testing.T, plugins bool) *deletiontest.Env {
	t.Helper()
	dir := t.TempDir()
	if !plugins {
		return deletiontest.New(t, deletiontest.Options{})
	}
	// Plugins inherit nothing from Lethe's environment: the recorder's
	// settings are configured for its binary.
	return deletiontest.New(t, deletiontest.Options{
		Plugins: []string{recorderBin},
		PluginEnv: map[string]map[string]string{filepath.Base(recorderBin): {
			"LETHE_RECORD_FILE":     filepath.Join(dir, "record.tsv"),
			"LETHE_RECORD_LABELLED": "1",
		}},
	})
}

// mixed is 4 pods (one labelled tier=db), 3 deployments (one labelled
// tier=db) and 2 cluster-scoped volumes.
func mixed() []archivetest.ItemSpec {
	var out []archivetest.ItemSpec
	for i := range 4 {
		s := archivetest.ItemSpec{Resource: "pods", Kind: "Pod", Namespace: "ns-a", Name: fmt.Sprintf("pod-%d", i)}
		if i == 0 {
			s.Labels = map[string]string{"tier": "db"}
		}
		out = append(out, s)
	}
	for i := range 3 {
		s := archivetest.ItemSpec{Group: "apps", Resource: "deployments", Kind: "Deployment", Namespace: "ns-b", Name: fmt.Sprintf("dep-%d", i)}
		if i == 2 {
			s.Labels = map[string]string{"tier": "db"}
		}
		out = append(out, s)
	}
	for i := range 2 {
		out = append(out, archivetest.ItemSpec{Resource: "persistentvolumes", Kind: "PersistentVolume", Name: fmt.Sprintf("pv-%d", i)})
	}
	return out
}

func tarball(t *testing.T, specs []archivetest.ItemSpec, c archivetest.Compression) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, archivetest.Write(&buf, specs, archivetest.Options{Compression: c, PreferredVersionCopies: true}))
	return bytes.NewReader(buf.Bytes())
}

// TestCreateRecordsExpectedPlugins: registration records, per installed
// plugin, how many items it selects (by resource, namespace scope and
// label), with samples, and the storage location; and those counts are
// exactly what the deletion then delivers.
func TestCreateRecordsExpectedPlugins(t *testing.T) {
	e := newEnv(t, true)
	res, err := e.Registry.Create(e.Ctx, registry.Request{Name: "nightly", Tarball: tarball(t, mixed(), archivetest.Gzip), TTL: time.Hour})
	require.NoError(t, err)

	r, err := e.Store.Get(e.Ctx, backup.Key("nightly"))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.Equal(t, res.Backup.Spec, b.Spec)
	require.EqualValues(t, 9, b.Spec.Items)
	require.Equal(t, e.Blobs.URL(), b.Spec.StorageLocation)
	require.Equal(t, "backups/nightly/nightly.tar.gz", b.Spec.StorageKey)
	require.NotNil(t, b.Spec.ExpiresAt)
	stored, err := e.Blobs.Stat(e.Ctx, b.Spec.StorageKey)
	require.NoError(t, err)
	require.False(t, b.Spec.StorageVersion.IsZero(), "the stored object's identity is pinned")
	require.Equal(t, stored.Version, b.Spec.StorageVersion)
	got := map[string]int64{}
	for name, ep := range b.Spec.ExpectedPlugins {
		got[name] = ep.Items
		require.Len(t, ep.Samples, int(min(ep.Items, registry.SamplesPerPlugin)), name)
	}
	require.Equal(t, map[string]int64{pluginA: 9, pluginB: 9, pluginC: 4, pluginD: 2}, got)
	require.ElementsMatch(t, []string{"pods/ns-a/pod-0", "deployments.apps/ns-b/dep-2"}, b.Spec.ExpectedPlugins[pluginD].Samples)

	// The deletion delivers exactly what was counted.
	rep, err := e.Deleter.Delete(e.Ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	for name, n := range got {
		require.EqualValues(t, n, rep.Counts[name].Done+rep.Counts[name].Skipped, name)
	}
}

// TestCreateWithoutPluginsRecordsNone: with no plugin installed the
// backup records an empty set, which is not the "never recorded" of an
// older backup.
func TestCreateWithoutPluginsRecordsNone(t *testing.T) {
	e := newEnv(t, false)
	_, err := e.Registry.Create(e.Ctx, registry.Request{Name: "bare", Tarball: tarball(t, mixed(), archivetest.Gzip)})
	require.NoError(t, err)
	r, err := e.Store.Get(e.Ctx, backup.Key("bare"))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.True(t, b.Spec.ExpectedRecorded())
	require.Empty(t, b.Spec.ExpectedPlugins)

	legacy := &backup.Backup{Resource: &catalog.Resource{Spec: []byte(`{"storageKey":"k"}`), Kind: backup.Kind}}
	b2, err := backup.FromResource(legacy.Resource)
	require.NoError(t, err)
	require.False(t, b2.Spec.ExpectedRecorded())
}

// TestCreateStoresZstdAsTarZst: the key follows the magic bytes.
func TestCreateStoresZstdAsTarZst(t *testing.T) {
	e := newEnv(t, true)
	_, err := e.Registry.Create(e.Ctx, registry.Request{Name: "zz", Tarball: tarball(t, mixed(), archivetest.Zstd), Source: "zz.tar.gz"})
	require.NoError(t, err)
	r, err := e.Store.Get(e.Ctx, backup.Key("zz"))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.Equal(t, "backups/zz/zz.tar.zst", b.Spec.StorageKey)
	_, err = e.Blobs.Stat(e.Ctx, "backups/zz/zz.tar.zst")
	require.NoError(t, err)
	_, err = e.Blobs.Stat(e.Ctx, "backups/zz/zz.tar.gz")
	require.ErrorIs(t, err, blobstore.ErrNotFound)

	// The same name again is refused whatever the compression.
	_, err = e.Registry.Create(e.Ctx, registry.Request{Name: "zz", Tarball: tarball(t, mixed(), archivetest.Gzip)})
	require.ErrorIs(t, err, registry.ErrAlreadyExists)

	// And sync finds it under its .tar.zst key once the record is gone.
	rep, err := e.Deleter.Delete(e.Ctx, "zz", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	_, err = e.Blobs.Stat(e.Ctx, "backups/zz/zz.tar.zst")
	require.ErrorIs(t, err, blobstore.ErrNotFound)
}

// storageFiles lists everything under the file storage, folders too.
func storageFiles(t *testing.T, e *deletiontest.Env) []string {
	t.Helper()
	var out []string
	root := filepath.Join(e.Dir, "storage")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == root {
			return nil
		}
		if p != root {
			out = append(out, p)
		}
		return err
	})
	require.NoError(t, err)
	return out
}

// TestCreateBadInputChangesNothing: each refusal is one line, typed as
// bad input, and leaves no record, no tarball and no folder behind.
func TestCreateBadInputChangesNothing(t *testing.T) {
	e := newEnv(t, true)
	cases := []struct {
		name   string
		req    registry.Request
		substr string
	}{
		{"253-char name", registry.Request{Name: strings.Repeat("a", 253)}, "at most 63"},
		{"64-char name", registry.Request{Name: strings.Repeat("b", 64)}, "at most 63"},
		{"upper case", registry.Request{Name: "Nightly"}, "invalid backup name"},
		{"label key with a space", registry.Request{Name: "ok", Labels: map[string]string{"a b": "c"}}, `label key "a b"`},
		{"label value with a space", registry.Request{Name: "ok", Labels: map[string]string{"team": "d b"}}, `label team="d b"`},
		{"label prefix not DNS", registry.Request{Name: "ok", Labels: map[string]string{"Ex_ample/x": "1"}}, "label key"},
		{"negative TTL", registry.Request{Name: "ok", TTL: -time.Hour}, "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.Tarball = tarball(t, mixed(), archivetest.Gzip)
			_, err := e.Registry.Create(e.Ctx, c.req)
			var ie *registry.InputError
			require.ErrorAs(t, err, &ie)
			require.Contains(t, err.Error(), c.substr)
			require.NotContains(t, err.Error(), "\n")
			require.Less(t, len(err.Error()), 300, "one readable line")
			page, err := e.Store.List(e.Ctx, catalog.ListOptions{Kind: backup.Kind})
			require.NoError(t, err)
			require.Empty(t, page.Items)
			require.Empty(t, storageFiles(t, e))
		})
	}
	// A label in Kubernetes syntax is fine.
	_, err := e.Registry.Create(e.Ctx, registry.Request{Name: "ok", Labels: map[string]string{"example.com/team": "db-1", "empty": ""}, Tarball: tarball(t, mixed(), archivetest.Gzip)})
	require.NoError(t, err)
}

// problemPlugins is the real host with a Problems list set by the test:
// discovery problems are reported by the plugin host's own code
// (internal/pluginhost), so the registry is tested here with that one
// method replaced.
type problemPlugins struct {
	*pluginhost.Host
	problems []pluginhost.Problem
}

func (p problemPlugins) Problems() []pluginhost.Problem { return p.problems }

// TestRegistrationRefusesWithPluginProblems: a plugin binary that cannot
// be loaded would make the recorded set incomplete, so create and sync
// refuse, naming it, and change nothing.
func TestRegistrationRefusesWithPluginProblems(t *testing.T) {
	e := newEnv(t, true)
	broken := problemPlugins{e.Host, []pluginhost.Problem{{Binary: "/plugins/ebs", Names: []string{"example.com/ebs"}, Err: errors.New("not executable")}}}
	reg, err := registry.New(&registry.Config{Store: e.Store, Blobs: e.Blobs, Plugins: broken})
	require.NoError(t, err)

	_, err = reg.Create(e.Ctx, registry.Request{Name: "nightly", Tarball: tarball(t, mixed(), archivetest.Gzip)})
	var pe *registry.PluginProblemsError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, err.Error(), "/plugins/ebs (example.com/ebs): not executable")
	require.Empty(t, storageFiles(t, e))

	// A tarball in storage is not imported either; a dry run still reports.
	require.NoError(t, e.Blobs.Put(e.Ctx, backup.StorageKey("found"), tarball(t, mixed(), archivetest.Gzip)))
	_, err = reg.Sync(e.Ctx, registry.SyncOptions{})
	require.ErrorAs(t, err, &pe)
	res, err := reg.Sync(e.Ctx, registry.SyncOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []registry.SyncResult{{Kind: registry.SyncResultKind, Name: "found", Action: registry.SyncWouldImport, Items: 9, Warning: registry.WarningNoMetadata}}, res)
	_, err = e.Store.Get(e.Ctx, backup.Key("found"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// TestSyncFilter: sync imports what the catalog does not know, with its
// expected plugins, and never re-imports a backup pending deletion or
// purged; a hostile tarball or a name too long is rejected.
func TestSyncFilter(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	put := func(key string) {
		t.Helper()
		require.NoError(t, e.Blobs.Put(ctx, key, tarball(t, mixed(), archivetest.Gzip)))
	}
	// Active, in the catalog.
	_, err := e.Registry.Create(ctx, registry.Request{Name: "active", Tarball: tarball(t, mixed(), archivetest.Gzip)})
	require.NoError(t, err)
	// Scheduled: a deletion pending.
	_, err = e.Registry.Create(ctx, registry.Request{Name: "pending", Tarball: tarball(t, mixed(), archivetest.Gzip),
		Annotations: map[string]string{catalog.AnnotationDeletionDelay: "24h"}})
	require.NoError(t, err)
	rep, err := e.Deleter.Delete(ctx, "pending", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultScheduled, rep.Result)
	// Purged, then its tarball put back (a Velero sync, a restore).
	_, err = e.Registry.Create(ctx, registry.Request{Name: "purged", Tarball: tarball(t, mixed(), archivetest.Gzip)})
	require.NoError(t, err)
	rep, err = e.Deleter.Delete(ctx, "purged", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	put(backup.StorageKey("purged"))
	// Gone from the catalog but still in the retry queue (its purge
	// crashed before the queue forgot it): never re-imported either.
	_, err = e.Store.RecordRetries(ctx, []catalog.RetryRecord{{RetryIdentity: catalog.RetryIdentity{
		Kind: "BackupItem", Key: backup.Key("queued").String(), ItemID: "0:pods/ns/p", Plugin: "x.io/y"}}},
		func(*catalog.RetryRow) catalog.RetryPlan { return catalog.RetryPlan{State: catalog.RetryDiscarded} })
	require.NoError(t, err)
	put(backup.StorageKey("queued"))
	// New ones.
	put(backup.StorageKey("fresh"))
	put(backup.StorageKeyExt("fresh-zstd", backup.ExtZstd))
	long := strings.Repeat("l", 64)
	put(backup.StorageKey(long))
	var hostile bytes.Buffer
	require.NoError(t, archivetest.WriteEntries(&hostile, []archivetest.Entry{
		{Name: "metadata/version", Body: []byte("1.1.0\n")},
		{Name: "resources/pods/namespaces/ns-0/../../../../etc/evil.json", Body: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"evil","namespace":"ns-0"}}`)},
	}, archivetest.Gzip))
	require.NoError(t, e.Blobs.Put(ctx, backup.StorageKey("hostile"), &hostile))

	dry, err := e.Registry.Sync(ctx, registry.SyncOptions{DryRun: true})
	require.NoError(t, err)
	_, err = e.Store.Get(ctx, backup.Key("fresh"))
	require.ErrorIs(t, err, catalog.ErrNotFound, "a dry run imports nothing")

	res, err := e.Registry.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	actions, reasons := map[string]string{}, map[string]string{}
	for _, r := range res {
		actions[r.Name], reasons[r.Name] = r.Action, r.Reason
	}
	require.Contains(t, reasons["pending"], "deletion pending (Scheduled)")
	require.Contains(t, reasons["purged"], "purged at")
	require.Contains(t, reasons["queued"], "in the retry queue")
	require.Equal(t, map[string]string{
		"active": registry.SyncSkipped, "pending": registry.SyncSkipped, "purged": registry.SyncSkipped, "queued": registry.SyncSkipped,
		"fresh": registry.SyncImported, "fresh-zstd": registry.SyncImported,
		long: registry.SyncRejected, "hostile": registry.SyncRejected,
	}, actions)
	for _, r := range dry {
		if r.Action == registry.SyncWouldImport {
			require.Equal(t, registry.SyncImported, actions[r.Name], r.Name)
		} else {
			require.Equal(t, actions[r.Name], r.Action, r.Name)
		}
	}

	r, err := e.Store.Get(ctx, backup.Key("pending"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseScheduled, r.Phase, "sync left the pending deletion alone")
	_, err = e.Store.Get(ctx, backup.Key("purged"))
	require.ErrorIs(t, err, catalog.ErrNotFound, "a purged backup never comes back")

	for name, key := range map[string]string{"fresh": "backups/fresh/fresh.tar.gz", "fresh-zstd": "backups/fresh-zstd/fresh-zstd.tar.zst"} {
		r, err := e.Store.Get(ctx, backup.Key(name))
		require.NoError(t, err)
		b, err := backup.FromResource(r)
		require.NoError(t, err)
		require.Equal(t, key, b.Spec.StorageKey)
		require.Equal(t, e.Blobs.URL(), b.Spec.StorageLocation)
		require.EqualValues(t, 4, b.Spec.ExpectedPlugins[pluginC].Items, name)
		require.Equal(t, key, r.Annotations[registry.AnnotationImportedFrom])
		stored, err := e.Blobs.Stat(ctx, key)
		require.NoError(t, err)
		require.False(t, b.Spec.StorageVersion.IsZero(), "the imported object's identity is pinned")
		require.Equal(t, stored.Version, b.Spec.StorageVersion, name)
		require.Equal(t, stored.Size, b.Spec.Size, name)
	}
}
