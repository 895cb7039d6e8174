package deletion_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// veleroPipeline is a real pipeline (SQLite file, storage, plugin host
// with an empty plugin folder) on a Velero bucket, opened from paths so
// that a child process can open the same one.
type veleroPipeline struct {
	store catalog.Store
	blobs blobstore.Store
	reg   *registry.Registry
	del   *deletion.Deleter
}

func openVeleroPipeline(tb testing.TB, dir, storage string, hooks *deletion.TestHooks) *veleroPipeline {
	tb.Helper()
	return openVeleroPipelineWith(tb, dir, storage, hooks, &pluginhost.Config{})
}

// openVeleroPipelineWith is openVeleroPipeline with a plugin host
// configuration (its Dir is set here).
func openVeleroPipelineWith(tb testing.TB, dir, storage string, hooks *deletion.TestHooks, hcfg *pluginhost.Config) *veleroPipeline {
	tb.Helper()
	ctx := context.Background()
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(dir, "lethe.db"), nil)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	bl, err := blobstore.Open(ctx, storage)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = bl.Close() })
	pdir := filepath.Join(dir, "plugins")
	require.NoError(tb, os.MkdirAll(pdir, 0o750))
	c := *hcfg
	c.Dir = pdir
	h, err := pluginhost.New(&c)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = h.Close() })
	del, err := deletion.New(&deletion.Config{Store: st, Blobs: bl, Plugins: deletion.HostPlugins(h)})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = del.Close() })
	if hooks != nil {
		deletion.SetTestHooks(del, *hooks)
	}
	reg, err := registry.New(&registry.Config{Store: st, Blobs: bl, Plugins: h})
	require.NoError(tb, err)
	return &veleroPipeline{store: st, blobs: bl, reg: reg, del: del}
}

// putBucket uploads the committed fixture bucket, laid out as Velero 1.18
// lays out a backup storage location.
func putBucket(t *testing.T, bl blobstore.Store) velerotest.Files {
	t.Helper()
	files, err := velerotest.ReadDir("../velero/testdata/bucket-1.18")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, k := range files.Keys() {
		require.NoError(t, bl.Put(context.Background(), k, bytes.NewReader(files[k])))
	}
	return files
}

func listKeys(t *testing.T, bl blobstore.Store, prefix string) []string {
	t.Helper()
	objs, err := bl.List(context.Background(), prefix)
	require.NoError(t, err)
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}

// veleroWouldImport lists the backups Velero's own sync would import from
// the bucket: the folders under backups/ holding a velero-backup.json
// (Velero's ListBackups takes the folders, and GetBackupMetadata reads
// that file; a folder without it is skipped with an error).
func veleroWouldImport(t *testing.T, bl blobstore.Store) []string {
	t.Helper()
	var out []string
	for _, k := range listKeys(t, bl, velero.BackupsDir) {
		if name, file, ok := velero.SplitKey(k); ok && file == velero.MetadataFile {
			out = append(out, name)
		}
	}
	return out
}

// TestVeleroBucketSyncAndPurge is issue 14 points 1 and 2 on a fixture
// bucket laid out by Velero 1.18, on file:// and on a real S3 server: a
// sync imports each backup from its velero-backup.json (labels, creation
// time, TTL and expiration, phase, storage location, included
// namespaces, digest and item count), imports a tarball without one with a
// warning, reports an unreadable one; a purge removes every key of the
// backup's folder, velero-backup.json first, and nothing of another
// backup or restore.
func TestVeleroBucketSyncAndPurge(t *testing.T) {
	for _, tc := range []struct {
		name    string
		storage func(t *testing.T) string
	}{
		{"file", func(t *testing.T) string { return "file://" + filepath.Join(t.TempDir(), "bucket") }},
		{"s3", func(t *testing.T) string { return s3test.Start(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var order []string
			p := openVeleroPipeline(t, t.TempDir(), tc.storage(t), &deletion.TestHooks{
				BeforePurgeKey: func(k string) { order = append(order, k) },
			})
			files := putBucket(t, p.blobs)

			res, err := p.reg.Sync(ctx, registry.SyncOptions{})
			require.NoError(t, err)
			byName := map[string]registry.SyncResult{}
			for _, r := range res {
				byName[r.Name] = r
			}
			require.Len(t, res, 5, "%+v", res)
			require.Equal(t, registry.SyncImported, byName["nightly-0412"].Action, "%+v", byName["nightly-0412"])
			require.Empty(t, byName["nightly-0412"].Warning)
			require.Equal(t, registry.SyncImported, byName["nightly-04121"].Action)
			require.Equal(t, registry.SyncImported, byName["no-metadata"].Action)
			require.Equal(t, registry.WarningNoMetadata, byName["no-metadata"].Warning)
			require.Equal(t, registry.SyncRejected, byName["bad-metadata"].Action)
			require.Contains(t, byName["bad-metadata"].Reason, "velero-backup.json is not valid JSON")
			require.Equal(t, registry.SyncSkipped, byName["failed"].Action)
			for _, n := range []string{"bad-metadata", "failed"} {
				_, err := p.store.Get(ctx, backup.Key(n))
				require.ErrorIs(t, err, catalog.ErrNotFound, n)
			}

			r, err := p.store.Get(ctx, backup.Key("nightly-0412"))
			require.NoError(t, err)
			b, err := backup.FromResource(r)
			require.NoError(t, err)
			require.Equal(t, map[string]string{"app": "shop", "velero.io/storage-location": "default"}, r.Labels)
			require.Equal(t, velerotest.Created, b.Created())
			require.Equal(t, velerotest.TTL, time.Duration(b.Spec.TTL))
			require.NotNil(t, b.Spec.ExpiresAt)
			require.Equal(t, velerotest.Created.Add(velerotest.TTL), *b.Spec.ExpiresAt)
			meta := files[velero.MetadataKey("nightly-0412")]
			require.False(t, b.Spec.Velero.MetadataModTime.IsZero())
			require.Equal(t, &backup.VeleroInfo{
				MetadataKey: velero.MetadataKey("nightly-0412"), StorageLocation: "default", Phase: "Completed",
				IncludedNamespaces: []string{"shop"}, UID: b.Spec.Velero.UID,
				// The file itself, recorded for the Velero plugins.
				Object: meta, MetadataSize: int64(len(meta)), MetadataModTime: b.Spec.Velero.MetadataModTime,
			}, b.Spec.Velero)
			require.NotEmpty(t, b.Spec.Velero.UID)
			require.Equal(t, int64(len(velerotest.Items())), b.Spec.Items)
			require.Len(t, b.Spec.Digest, 64)
			require.Equal(t, p.blobs.URL(), b.Spec.StorageLocation)

			nm, err := p.store.Get(ctx, backup.Key("no-metadata"))
			require.NoError(t, err)
			nmb, err := backup.FromResource(nm)
			require.NoError(t, err)
			require.Nil(t, nmb.Spec.Velero)
			require.Nil(t, nmb.Spec.ExpiresAt)

			rep, err := p.del.Delete(ctx, "nightly-0412", deletion.Options{NoPlugins: true})
			require.NoError(t, err)
			require.Equal(t, deletion.ResultPurged, rep.Result)
			dir := velero.BackupDir("nightly-0412")
			require.Empty(t, listKeys(t, p.blobs, dir), "every key of the folder is purged")
			require.NotEmpty(t, order)
			require.Equal(t, velero.MetadataKey("nightly-0412"), order[0], "velero-backup.json goes first: %v", order)
			var want []string
			for _, k := range files.Keys() {
				if strings.HasPrefix(k, dir) {
					want = append(want, k)
				}
			}
			require.ElementsMatch(t, want, order, "exactly the folder's keys")
			require.Len(t, order, 12, "velero-backup.json, the tarball and the 10 sibling files")
			for _, k := range files.Keys() {
				if !strings.HasPrefix(k, dir) {
					_, err := p.blobs.Stat(ctx, k)
					require.NoError(t, err, "%s is not the purged backup's and stays", k)
				}
			}
			require.Contains(t, strings.Join(rep.Purged, "\n"), "velero-backup.json")
		})
	}
}

// crashHelperEnv names the folder and storage of the pipeline that
// TestPurgeCrashHelper opens when it runs as the child of
// TestPurgeResumesAfterSIGKILL.
const crashHelperEnv = "LETHE_TEST_PURGE_CRASH_HELPER"

// TestPurgeCrashHelper is not a test on its own: run by
// TestPurgeResumesAfterSIGKILL as a child process, it deletes a backup and
// stops, forever, right before the purge's second key, after telling its
// parent which key that is. The parent SIGKILLs it there.
func TestPurgeCrashHelper(t *testing.T) {
	arg := os.Getenv(crashHelperEnv)
	if arg == "" {
		t.Skip("runs only as the child of TestPurgeResumesAfterSIGKILL")
	}
	dir, storage, _ := strings.Cut(arg, "|")
	n := 0
	p := openVeleroPipeline(t, dir, storage, &deletion.TestHooks{BeforePurgeKey: func(k string) {
		n++
		if n == 2 {
			fmt.Printf("PURGING %s\n", k)
			_ = os.Stdout.Sync()
			select {} // SIGKILLed here
		}
	}})
	_, err := p.del.Delete(context.Background(), "nightly-0412", deletion.Options{NoPlugins: true})
	t.Fatalf("the delete returned (%v) instead of being killed mid-purge", err)
}

// TestPurgeResumesAfterSIGKILL is issue 14 point 2: the process purging a
// Velero backup is SIGKILLed in the middle of the purge, after
// velero-backup.json and before anything else. Velero's sync would not
// re-import the backup then (its folder has no velero-backup.json), nor
// would Lethe's (the backup is still in Deleting), and the next run
// resumes the purge and removes everything, on file:// and on S3.
func TestPurgeResumesAfterSIGKILL(t *testing.T) {
	for _, tc := range []struct {
		name    string
		storage func(t *testing.T) string
	}{
		{"file", func(t *testing.T) string { return "file://" + filepath.Join(t.TempDir(), "bucket") }},
		{"s3", func(t *testing.T) string { return s3test.Start(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir, storage := t.TempDir(), tc.storage(t)
			p := openVeleroPipeline(t, dir, storage, nil)
			putBucket(t, p.blobs)
			_, err := p.reg.Sync(ctx, registry.SyncOptions{})
			require.NoError(t, err)
			folder := velero.BackupDir("nightly-0412")
			before := listKeys(t, p.blobs, folder)
			require.Len(t, before, 12)

			cmd := exec.Command(os.Args[0], "-test.run=^TestPurgeCrashHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir+"|"+storage)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			cmd.Stderr = os.Stderr
			require.NoError(t, cmd.Start())
			killed := false
			t.Cleanup(func() {
				if !killed {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			})
			sc := bufio.NewScanner(out)
			var line string
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "PURGING ") {
					line = sc.Text()
					break
				}
			}
			require.NotEmpty(t, line, "the child never reached the purge")
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			err = cmd.Wait()
			killed = true
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee))
			require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())

			// Mid-purge: velero-backup.json is gone, the rest is there.
			after := listKeys(t, p.blobs, folder)
			require.Len(t, after, 11, "killed after the first key: %v", after)
			require.NotContains(t, after, velero.MetadataKey("nightly-0412"))
			require.Contains(t, after, velero.TarballKey("nightly-0412"))
			require.NotContains(t, veleroWouldImport(t, p.blobs), "nightly-0412", "Velero's sync cannot bring it back")
			r, err := p.store.Get(ctx, backup.Key("nightly-0412"))
			require.NoError(t, err)
			require.Equal(t, catalog.PhaseDeleting, r.Phase)
			res, err := p.reg.Sync(ctx, registry.SyncOptions{})
			require.NoError(t, err)
			for _, sr := range res {
				if sr.Name == "nightly-0412" {
					require.Equal(t, registry.SyncSkipped, sr.Action, "%+v", sr)
				}
			}

			// The next run resumes the purge.
			rep, err := p.del.Run(ctx, "nightly-0412", deletion.Options{NoPlugins: true})
			require.NoError(t, err)
			require.Equal(t, deletion.ResultPurged, rep.Result)
			require.Empty(t, listKeys(t, p.blobs, folder))
			_, err = p.store.Get(ctx, backup.Key("nightly-0412"))
			require.ErrorIs(t, err, catalog.ErrNotFound)
			require.Contains(t, listKeys(t, p.blobs, velero.BackupDir("nightly-04121")), velero.MetadataKey("nightly-04121"))
			res, err = p.reg.Sync(ctx, registry.SyncOptions{DryRun: true})
			require.NoError(t, err)
			for _, sr := range res {
				require.NotEqual(t, "nightly-0412", sr.Name, "nothing left of it to sync")
			}
		})
	}
}

// buildVeleroPlugin builds ../pluginhost/testdata/veleroplugin, a plugin
// built against Velero's own framework in a module of its own.
func buildVeleroPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "velero-recorder")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = "../pluginhost/testdata/veleroplugin"
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the Velero plugin: %s", out)
	return bin
}

// TestVeleroPluginDeletesEveryMatchingItemOnce is issue 14 point 4 end to
// end: a backup synced from a Velero bucket records the Velero plugins as
// expected plugins, its deletion refuses to start without them, and with
// them every item each plugin selects reaches it exactly once, with the
// backup as a velero.io/v1 Backup naming Velero's storage location.
func TestVeleroPluginDeletesEveryMatchingItemOnce(t *testing.T) {
	ctx := context.Background()
	bin := buildVeleroPlugin(t)
	vdir := filepath.Join(t.TempDir(), "velero-plugins")
	require.NoError(t, os.Mkdir(vdir, 0o755))
	require.NoError(t, os.Link(bin, filepath.Join(vdir, "velero-recorder")))
	record := filepath.Join(t.TempDir(), "record.tsv")
	hcfg := &pluginhost.Config{VeleroDir: vdir, PluginEnv: map[string]map[string]string{"velero-recorder": {"VELERO_RECORD_FILE": record}}}
	dir, storage := t.TempDir(), "file://"+filepath.Join(t.TempDir(), "bucket")
	p := openVeleroPipelineWith(t, dir, storage, nil, hcfg)
	putBucket(t, p.blobs)
	_, err := p.reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	r, err := p.store.Get(ctx, backup.Key("nightly-0412"))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.Equal(t, int64(3), b.Spec.ExpectedPlugins["example.io/recorder"].Items)
	require.Equal(t, int64(1), b.Spec.ExpectedPlugins["example.io/pvs"].Items)

	// Without the Velero plugins, the deletion refuses and changes nothing.
	bare := openVeleroPipeline(t, dir, storage, nil) // the same catalog, no Velero plugin folder
	_, err = bare.del.Delete(ctx, "nightly-0412", deletion.Options{NoPlugins: true})
	var me *deletion.MissingPluginsError
	require.ErrorAs(t, err, &me)
	r, err = p.store.Get(ctx, backup.Key("nightly-0412"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)

	rep, err := p.del.Delete(ctx, "nightly-0412", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result, "%+v", rep)
	data, err := os.ReadFile(record)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	// The Backup is the bucket's velero-backup.json, passed through as it
	// is: its spec.includedNamespaces (the last column) is not in the
	// catalog-built one.
	require.ElementsMatch(t, []string{
		"example.io/pvs\tPersistentVolume\t/pv-data\tnightly-0412\tdefault\tshop\tshop",
		"example.io/recorder\tConfigMap\tshop/flags\tnightly-0412\tdefault\tshop\tshop",
		"example.io/recorder\tConfigMap\tshop/settings\tnightly-0412\tdefault\tshop\tshop",
		"example.io/recorder\tSecret\tshop/db-password\tnightly-0412\tdefault\tshop\tshop",
	}, lines, "every matching item reached its plugin exactly once")
	require.Empty(t, listKeys(t, p.blobs, velero.BackupDir("nightly-0412")))

	// A backup without velero-backup.json: the Backup built from the
	// catalog (no labels, no includedNamespaces, Lethe's storage URL).
	require.NoError(t, os.Remove(record))
	rep, err = p.del.Delete(ctx, "no-metadata", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result, "%+v", rep)
	data, err = os.ReadFile(record)
	require.NoError(t, err)
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		f := strings.Split(l, "\t")
		require.Len(t, f, 7, l)
		require.Equal(t, "no-metadata", f[3], l)
		require.Empty(t, f[6], "built from the catalog: %s", l)
	}
}

// TestNativeVolumeSnapshotsAreItems is issue 14 point 3 in the pipeline,
// with the example plugin's real binary: the native volume snapshot each
// backup of a Velero 1.18 bucket lists reaches lethe.io/native-snapshots
// once, after the tarball's items; nothing is purged while it is
// blocked; and a list that cannot be read, or is not the one the sync
// recorded, stops the deletion before anything changes.
func TestNativeVolumeSnapshotsAreItems(t *testing.T) {
	ctx := context.Background()
	dir, storage, cloud := t.TempDir(), "file://"+filepath.Join(t.TempDir(), "bucket"), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "plugins"), 0o750))
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "plugins", "native-snapshots"), "../../plugins/native-snapshots")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the plugin: %s", out)
	p := openVeleroPipelineWith(t, dir, storage, nil, &pluginhost.Config{
		PluginEnv: map[string]map[string]string{"native-snapshots": {"LETHE_FAKE_CLOUD_DIR": cloud}},
	})
	putBucket(t, p.blobs)
	a, c := "nightly-0412", "no-metadata"
	for _, name := range []string{a, c} {
		require.NoError(t, os.WriteFile(filepath.Join(cloud, velerotest.SnapshotID(name)), nil, 0o600))
	}
	// A folder whose list cannot be read is not imported.
	require.NoError(t, p.blobs.Put(ctx, velero.VolumeSnapshotsKey("nightly-04121"), strings.NewReader("[]")))
	res, err := p.reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	for _, sr := range res {
		if sr.Name == "nightly-04121" {
			require.Equal(t, registry.SyncRejected, sr.Action)
			require.Contains(t, sr.Reason, "volume snapshot list unusable")
		}
	}
	r, err := p.store.Get(ctx, backup.Key(a))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.Spec.ExpectedPlugins["lethe.io/native-snapshots"].Items)
	require.Equal(t, []string{"nativevolumesnapshots.lethe.io//pv-data"}, b.Spec.ExpectedPlugins["lethe.io/native-snapshots"].Samples)
	require.Equal(t, int64(1), b.Spec.VolumeSnapshots.Count)

	plan, err := p.del.Plan(ctx, a, deletion.Options{})
	require.NoError(t, err)
	require.Empty(t, plan.Rejected)
	require.Equal(t, int64(len(velerotest.Items())+1), plan.TotalItems)
	require.Equal(t, int64(1), plan.Plugins[0].Items)

	full := listKeys(t, p.blobs, velero.BackupDir(a))
	lock := filepath.Join(cloud, velerotest.SnapshotID(a)+".lock")
	require.NoError(t, os.WriteFile(lock, nil, 0o600))
	rep, err := p.del.Delete(ctx, a, deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	require.Equal(t, int64(len(velerotest.Items())+1), rep.TotalItems)
	require.Len(t, rep.Unsettled, 1)
	require.Equal(t, "nativevolumesnapshots.lethe.io//pv-data", rep.Unsettled[0].ItemKey)
	require.Equal(t, "blocked", rep.Unsettled[0].Outcome)
	require.Equal(t, full, listKeys(t, p.blobs, velero.BackupDir(a)), "nothing purged while the snapshot is blocked")
	require.NoError(t, os.Remove(lock))
	rep, err = p.del.Run(ctx, a, deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result, "%+v", rep)
	require.Empty(t, listKeys(t, p.blobs, velero.BackupDir(a)))
	calls, err := os.ReadFile(filepath.Join(cloud, "api-calls.log"))
	require.NoError(t, err)
	require.Equal(t, "DeleteSnapshot "+velerotest.SnapshotID(a)+" default in-use\n"+
		"DeleteSnapshot "+velerotest.SnapshotID(a)+" default deleted\n", string(calls))

	// Another list than the one recorded, then one that is not gzip:
	// refused, and nothing changes.
	key := velero.VolumeSnapshotsKey(c)
	other := velerotest.VolumeSnapshots(c)
	other[0]["status"] = map[string]any{"providerSnapshotID": "snap-someone-elses", "phase": "Completed"}
	for _, tc := range []struct {
		data []byte
		want string
	}{
		{velerotest.VolumeSnapshotsFile(other), "was recorded"},
		{[]byte("not gzip"), "is not gzip"},
	} {
		require.NoError(t, p.blobs.Put(ctx, key, bytes.NewReader(tc.data)))
		_, err = p.del.Delete(ctx, c, deletion.Options{})
		require.ErrorIs(t, err, backup.ErrVolumeSnapshotsUnusable)
		require.ErrorContains(t, err, tc.want)
		r, err = p.store.Get(ctx, backup.Key(c))
		require.NoError(t, err)
		require.Equal(t, catalog.PhaseActive, r.Phase)
		require.Contains(t, listKeys(t, p.blobs, velero.BackupDir(c)), velero.TarballKey(c))
	}
	require.FileExists(t, filepath.Join(cloud, velerotest.SnapshotID(c)))
}

// TestNativeSnapshotsNoPluginSelectsAreNamedInAWarning: a backup's native
// volume snapshots that no installed plugin selects are settled without
// any plugin, so the snapshots stay in the cloud: the plan and the report
// say so in a warning, not only a count.
func TestNativeSnapshotsNoPluginSelectsAreNamedInAWarning(t *testing.T) {
	ctx := context.Background()
	dir, storage := t.TempDir(), "file://"+filepath.Join(t.TempDir(), "bucket")
	p := openVeleroPipelineWith(t, dir, storage, nil, &pluginhost.Config{})
	putBucket(t, p.blobs)
	_, err := p.reg.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	a := "nightly-0412"
	plan, err := p.del.Plan(ctx, a, deletion.Options{NoPlugins: true})
	require.NoError(t, err)
	require.Contains(t, strings.Join(plan.Warnings, "\n"), "1 native volume snapshot(s) would go to no plugin: the backup's deletion leaves them in the cloud")
	rep, err := p.del.Delete(ctx, a, deletion.Options{NoPlugins: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Contains(t, strings.Join(rep.Warnings, "\n"), "1 native volume snapshot(s) went to no plugin")
}
