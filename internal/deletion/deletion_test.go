package deletion_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/deletion/deletiontest"
	"github.com/lethehq/lethe/internal/pluginhost"
)

// recorderBin is the test plugin binary (testdata/recorder), and noopBin
// the noop example plugin, built once.
var recorderBin, noopBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lethe-deletion-test-")
	if err != nil {
		panic(err)
	}
	recorderBin = filepath.Join(dir, "recorder")
	noopBin = filepath.Join(dir, "noop")
	for bin, pkg := range map[string]string{recorderBin: "./testdata/recorder", noopBin: "../../plugins/noop"} {
		if err := deletiontest.Build(bin, pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	// goleak: every run, session and lease renewer stops with its test.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

const (
	pluginA = "test.lethe.io/a-first"
	pluginB = "test.lethe.io/b-second"
	pluginC = "test.lethe.io/c-pods"
)

type env struct {
	t        *testing.T
	ctx      context.Context
	pe       *deletiontest.Env
	store    catalog.Store
	blobs    blobstore.Store
	host     *pluginhost.Host
	del      *deletion.Deleter
	record   string
	blockDir string
	now      time.Time
	// pluginEnv is the environment configured for the recorder binary
	// (plugins inherit none): hosts a test starts must pass it too.
	pluginEnv map[string]map[string]string
}

// newEnv wires a real SQLite catalog, a file storage folder and the
// recorder plugin running as a subprocess.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWithStorage(t, "")
}

// newEnvWithStorage is newEnv with the backup storage at storageURL (a
// file:// folder in the test's temp dir when empty).
func newEnvWithStorage(t *testing.T, storageURL string) *env {
	t.Helper()
	return newEnvWith(t, storageURL, nil)
}

// newEnvWithLogger is newEnv with the deleter logging to logger.
func newEnvWithLogger(t *testing.T, logger hclog.Logger) *env {
	t.Helper()
	return newEnvWith(t, "", logger)
}

func newEnvWith(t *testing.T, storageURL string, logger hclog.Logger) *env {
	t.Helper()
	return newEnvWithHook(t, storageURL, func(c *deletion.Config) { c.Logger = logger })
}

// newEnvWithHook is newEnvWithStorage with hook applied to the deleter's
// configuration.
func newEnvWithHook(t *testing.T, storageURL string, hook func(*deletion.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, ctx: context.Background(), record: filepath.Join(dir, "record.tsv"), blockDir: filepath.Join(dir, "locks"), now: time.Now().UTC()}
	require.NoError(t, os.MkdirAll(e.blockDir, 0o750))
	// Plugins inherit no environment: the recorder is configured for.
	recEnv := map[string]string{"LETHE_RECORD_FILE": e.record, "LETHE_RECORD_CONTROL_DIR": e.blockDir}
	if v := os.Getenv("LETHE_RECORD_LABELLED"); v != "" {
		recEnv["LETHE_RECORD_LABELLED"] = v
	}

	e.pluginEnv = map[string]map[string]string{filepath.Base(recorderBin): recEnv}
	pe := deletiontest.New(t, deletiontest.Options{
		Plugins:    []string{recorderBin},
		PluginEnv:  e.pluginEnv,
		StorageURL: storageURL,
		Catalog:    &catalog.Config{Now: e.clock},
		Deletion: func(c *deletion.Config) {
			c.CheckpointEvery = 50
			hook(c)
		},
	})
	e.pe, e.store, e.blobs, e.host, e.del = pe, pe.Store, pe.Blobs, pe.Host, pe.Deleter
	return e
}

func (e *env) clock() time.Time { return e.now }

// items returns n items: namespaced pods, deployments and cluster-scoped
// persistent volumes.
func items(n int) []archivetest.ItemSpec {
	out := make([]archivetest.ItemSpec, 0, n)
	for i := range n {
		switch i % 3 {
		case 0:
			out = append(out, archivetest.ItemSpec{Resource: "pods", Kind: "Pod", Namespace: "ns-a", Name: fmt.Sprintf("item-%d", i), Size: 300})
		case 1:
			out = append(out, archivetest.ItemSpec{Group: "apps", Resource: "deployments", Kind: "Deployment", Namespace: "ns-b", Name: fmt.Sprintf("item-%d", i), Size: 300})
		default:
			out = append(out, archivetest.ItemSpec{Resource: "persistentvolumes", Kind: "PersistentVolume", Name: fmt.Sprintf("item-%d", i), Size: 300})
		}
	}
	return out
}

// addBackup stores a tarball and records the backup, as `backup create`
// does.
func (e *env) addBackup(name string, specs []archivetest.ItemSpec, opts archivetest.Options, annotations map[string]string) {
	e.t.Helper()
	var buf bytes.Buffer
	require.NoError(e.t, archivetest.Write(&buf, specs, opts))
	e.addRawBackup(name, buf.Bytes(), annotations)
}

func (e *env) addRawBackup(name string, tarball []byte, annotations map[string]string) {
	e.t.Helper()
	e.pe.AddBackup(name, bytes.NewReader(tarball), annotations, nil)
}

// lines returns the recorder's lines, each "<plugin>\t<item key>".
func (e *env) lines() []string {
	e.t.Helper()
	b, err := os.ReadFile(e.record)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(e.t, err)
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func keyOf(s archivetest.ItemSpec) string { return s.Key() }

func (e *env) requirePurged(name string) {
	e.t.Helper()
	_, err := e.store.Get(e.ctx, backup.Key(name))
	require.ErrorIs(e.t, err, catalog.ErrNotFound)
	ts, err := e.store.GetTombstone(e.ctx, backup.Key(name))
	require.NoError(e.t, err)
	require.Equal(e.t, name, ts.Key.Name)
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey(name))
	require.ErrorIs(e.t, err, blobstore.ErrNotFound)
}

func TestDeleteDeliversEveryItemOnceInPluginOrder(t *testing.T) {
	e := newEnv(t)
	specs := items(300)
	// Velero 1.1.0 writes each item twice (plain and preferred version):
	// plugins must still see it once.
	e.addBackup("nightly", specs, archivetest.Options{PreferredVersionCopies: true}, nil)

	rep, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.EqualValues(t, 300, rep.TotalItems)

	// Every item exactly once per matching plugin, and for each item the
	// plugins ran in alphanumeric order of their names.
	pos := map[string]int{}
	for i, l := range e.lines() {
		_, dup := pos[l]
		require.False(t, dup, "delivered twice: %s", l)
		pos[l] = i
	}
	pods := 0
	for _, s := range specs {
		a, okA := pos[pluginA+"\t"+keyOf(s)]
		b, okB := pos[pluginB+"\t"+keyOf(s)]
		require.True(t, okA && okB, "item %s not delivered to both catch-all plugins", keyOf(s))
		require.Less(t, a, b, "item %s: %s ran after %s", keyOf(s), pluginA, pluginB)
		c, okC := pos[pluginC+"\t"+keyOf(s)]
		require.Equal(t, s.Resource == "pods", okC, "c-pods selects pods only; item %s", keyOf(s))
		if okC {
			pods++
			require.Less(t, b, c, "item %s: %s ran after %s", keyOf(s), pluginB, pluginC)
		}
	}
	require.Len(t, pos, 600+pods)
	require.EqualValues(t, 300, rep.Counts[pluginA].Done)
	require.EqualValues(t, pods, rep.Counts[pluginC].Done)
	e.requirePurged("nightly")
}

func TestFailedItemKeepsBackupAndRerunRetriesOnlyIt(t *testing.T) {
	e := newEnv(t)
	specs := items(120)
	e.addBackup("nightly", specs, archivetest.Options{}, nil)
	failFile := filepath.Join(e.blockDir, "item-77.fail")
	require.NoError(t, os.WriteFile(failFile, nil, 0o600))

	rep, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	require.Equal(t, 1, rep.UnsettledCount)
	require.Equal(t, pluginA, rep.Unsettled[0].Plugin)
	require.Equal(t, "failed", rep.Unsettled[0].Outcome)
	require.Contains(t, rep.Unsettled[0].Message, "injected failure")

	// The backup and its tarball stay, with the failure visible.
	r, err := e.store.Get(e.ctx, backup.Key("nightly"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
	require.Contains(t, r.Finalizers, catalog.FinalizerDeleteActions)
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey("nightly"))
	require.NoError(t, err)
	prog, rows, err := e.store.LoadProgress(e.ctx, r.UID)
	require.NoError(t, err)
	require.EqualValues(t, 120, prog.Watermark)
	require.Len(t, rows, 1)
	require.EqualValues(t, 1, prog.Counts[pluginA].Failed)
	// b-second never saw the failed item: the chain stops at the failure.
	first := e.lines()
	require.NotContains(t, first, pluginB+"\t"+"persistentvolumes//item-77")

	// Fixed: the rerun sends only the failed item, to a-first and then b-second.
	require.NoError(t, os.Remove(failFile))
	rep, err = e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	second := e.lines()[len(first):]
	require.Equal(t, []string{pluginA + "\tpersistentvolumes//item-77", pluginB + "\tpersistentvolumes//item-77"}, second)
	e.requirePurged("nightly")
}

func TestBlockedItemWaitsForItsLock(t *testing.T) {
	e := newEnv(t)
	e.addBackup("nightly", items(30), archivetest.Options{}, nil)
	lock := filepath.Join(e.blockDir, "item-5.lock")
	require.NoError(t, os.WriteFile(lock, nil, 0o600))

	rep, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	require.Equal(t, "blocked", rep.Unsettled[0].Outcome)
	require.Equal(t, e.now.Add(time.Minute), rep.Unsettled[0].NextAttemptAt.UTC())
	// The checkpoint counts it blocked at its plugin, neither failed nor done.
	prog, _, err := e.store.LoadProgress(e.ctx, e.backup("nightly").Resource.UID)
	require.NoError(t, err)
	blocker := rep.Unsettled[0].Plugin
	require.Equal(t, catalog.OutcomeCount{Done: 29, Blocked: 1}, prog.Counts[blocker], "%+v", prog.Counts)
	// So does the backup's status, which `backup get` shows.
	ds := e.backup("nightly").Status.Deletion
	require.NotNil(t, ds, "the backup's status has no deletion summary")
	require.EqualValues(t, 30, ds.TotalItems)
	require.EqualValues(t, 1, ds.Unsettled)
	require.Equal(t, catalog.OutcomeCount{Done: 29, Blocked: 1}, ds.Counts[blocker], "%+v", ds.Counts)
	stuck := condition(e.backup("nightly").Resource, "DeletionStuck")
	require.NotNil(t, stuck)
	require.Equal(t, "True", stuck.Status)
	since := stuck.LastTransitionTime

	e.now = e.now.Add(2 * time.Minute)
	rep, err = e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result, "still locked")
	require.Equal(t, 2, rep.Unsettled[0].Attempts)
	// Still stuck: one DeletionStuck condition, true since the first run.
	var stuckConds []catalog.Condition
	for _, c := range e.backup("nightly").Resource.Conditions {
		if c.Type == "DeletionStuck" {
			stuckConds = append(stuckConds, c)
		}
	}
	require.Len(t, stuckConds, 1, "%+v", stuckConds)
	require.True(t, since.Equal(stuckConds[0].LastTransitionTime), "true since %s, not %s", since, stuckConds[0].LastTransitionTime)

	require.NoError(t, os.Remove(lock))
	rep, err = e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	e.requirePurged("nightly")
}

func TestHostileTarballChangesNothing(t *testing.T) {
	e := newEnv(t)
	var buf bytes.Buffer
	require.NoError(t, archivetest.WriteEntries(&buf, []archivetest.Entry{
		{Name: "metadata/version", Body: []byte("1.1.0")},
		{Name: "resources/pods/namespaces/ns/ok.json", Body: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"ok","namespace":"ns"}}`)},
		{Name: "resources/pods/namespaces/ns/../../../../etc/passwd.json", Body: []byte(`{}`)},
	}, archivetest.Gzip))
	e.addRawBackup("evil", buf.Bytes(), nil)

	_, err := e.del.Delete(e.ctx, "evil", deletion.Options{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "etc/passwd")
	require.NotContains(t, err.Error(), "\n")

	r, err := e.store.Get(e.ctx, backup.Key("evil"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase, "a rejected tarball must change nothing")
	require.Empty(t, e.lines(), "no plugin may run on a hostile tarball")
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey("evil"))
	require.NoError(t, err)
}

func TestGraceWindowSchedulesAndUndeleteCancels(t *testing.T) {
	e := newEnv(t)
	e.addBackup("weekly", items(9), archivetest.Options{}, map[string]string{catalog.AnnotationDeletionDelay: "1h"})

	rep, err := e.del.Delete(e.ctx, "weekly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultScheduled, rep.Result)
	require.Equal(t, e.now.Add(time.Hour), rep.DueAt.UTC())
	require.Empty(t, e.lines(), "nothing irreversible in the grace window")

	_, err = e.del.Undelete(catalog.WithActor(e.ctx, "test"), "weekly")
	require.NoError(t, err)
	r, err := e.store.Get(e.ctx, backup.Key("weekly"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)

	// Scheduled again; asking again before the delay is a no-op; after
	// the delay it runs.
	_, err = e.del.Delete(e.ctx, "weekly", deletion.Options{})
	require.NoError(t, err)
	rep, err = e.del.Delete(e.ctx, "weekly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultScheduled, rep.Result)
	e.now = e.now.Add(61 * time.Minute)
	rep, err = e.del.Delete(e.ctx, "weekly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Len(t, e.lines(), 9*2+3)
}

func TestForceSkipsTheGraceWindow(t *testing.T) {
	e := newEnv(t)
	e.addBackup("weekly", items(6), archivetest.Options{}, map[string]string{catalog.AnnotationDeletionDelay: "24h"})
	rep, err := e.del.Delete(e.ctx, "weekly", deletion.Options{Force: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	e.requirePurged("weekly")
}

func TestDryRunPlanChangesNothing(t *testing.T) {
	e := newEnv(t)
	specs := items(30)
	e.addBackup("nightly", specs, archivetest.Options{}, nil)
	p, err := e.del.Plan(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Empty(t, p.Rejected)
	require.EqualValues(t, 30, p.TotalItems)
	require.Len(t, p.Plugins, 3)
	require.Equal(t, pluginA, p.Plugins[0].Plugin)
	require.EqualValues(t, 30, p.Plugins[0].Items)
	require.EqualValues(t, 10, p.Plugins[2].Items, "c-pods gets the 10 pods")
	require.Len(t, p.Plugins[2].Samples, 3)
	require.True(t, strings.HasPrefix(p.Plugins[2].Samples[0], "pods/"))
	require.Empty(t, e.lines())
	r, err := e.store.Get(e.ctx, backup.Key("nightly"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)
}

// leaseHeldBy makes the backup's deletion look claimed by holder.
func (e *env) leaseHeldBy(name, holder string) {
	e.t.Helper()
	_, err := e.del.Delete(e.ctx, name, deletion.Options{Async: true})
	require.NoError(e.t, err)
	r, err := e.store.Get(e.ctx, backup.Key(name))
	require.NoError(e.t, err)
	_, err = e.store.ClaimKey(e.ctx, deletion.Queue, r.UID, holder, time.Hour)
	require.NoError(e.t, err)
}

func TestSecondDeleterIsToldWhoHoldsTheLease(t *testing.T) {
	e := newEnv(t)
	e.addBackup("nightly", items(6), archivetest.Options{}, nil)
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s pid %d", host, os.Getppid()) // alive
	e.leaseHeldBy("nightly", holder)

	_, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "already being deleted by "+holder)
	require.Contains(t, err.Error(), "lease until")
	require.Empty(t, e.lines(), "the second deleter must not run plugins")
}

func TestLeaseOfADeadLocalProcessIsTakenOver(t *testing.T) {
	e := newEnv(t)
	e.addBackup("nightly", items(6), archivetest.Options{}, nil)
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	host, _ := os.Hostname()
	e.leaseHeldBy("nightly", fmt.Sprintf("%s pid %d ns %s", host, cmd.Process.Pid, nsOfThisProcess(t))) // exited

	rep, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)

	// A holder on another host is never presumed dead.
	e.addBackup("weekly", items(3), archivetest.Options{}, nil)
	e.leaseHeldBy("weekly", "elsewhere.example pid 1")
	_, err = e.del.Delete(e.ctx, "weekly", deletion.Options{})
	require.ErrorContains(t, err, "already being deleted by elsewhere.example pid 1")
}

// TestHostileTarballSwappedAfterCreateIsRefused: a hostile tarball put
// over a registered one is refused by its digest, before it is even
// parsed.
func TestHostileTarballSwappedAfterCreateIsRefused(t *testing.T) {
	e := newEnv(t)
	e.addBackup("nightly", items(6), archivetest.Options{}, nil)
	// Someone replaces the validated tarball with a hostile one.
	var buf bytes.Buffer
	require.NoError(t, archivetest.WriteEntries(&buf, []archivetest.Entry{
		{Name: "metadata/version", Body: []byte("1.1.0")},
		{Name: "resources/pods/namespaces/ns/link.json", Type: '2', Linkname: "/etc/passwd"},
	}, archivetest.Gzip))
	require.NoError(t, e.blobs.Put(e.ctx, backup.StorageKey("nightly"), &buf))

	_, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrTarballReplaced)
	r, err := e.store.Get(e.ctx, backup.Key("nightly"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)
	require.Empty(t, e.lines())
}

// TestItemOnlyInAVersionDirectoryIsDelivered: a tarball whose item exists
// only as a preferred-version copy must not lose that item on the fast,
// stateless read path.
func TestItemOnlyInAVersionDirectoryIsDelivered(t *testing.T) {
	e := newEnv(t)
	pod := func(name string) []byte {
		return []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `","namespace":"ns"}}`)
	}
	var buf bytes.Buffer
	require.NoError(t, archivetest.WriteEntries(&buf, []archivetest.Entry{
		{Name: "metadata/version", Body: []byte("1.1.0")},
		{Name: "resources/pods/namespaces/ns/plain.json", Body: pod("plain")},
		{Name: "resources/pods/v1-preferredversion/namespaces/ns/plain.json", Body: pod("plain")},
		{Name: "resources/pods/v1-preferredversion/namespaces/ns/only-copy.json", Body: pod("only-copy")},
	}, archivetest.Gzip))
	e.addRawBackup("odd", buf.Bytes(), nil)

	rep, err := e.del.Delete(e.ctx, "odd", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.EqualValues(t, 2, rep.TotalItems)
	require.Contains(t, e.lines(), pluginA+"\tpods/ns/only-copy")
	require.Contains(t, e.lines(), pluginA+"\tpods/ns/plain")
}

// TestDeleteFromS3Storage runs a deletion, with a blocked item and a
// resume, against a real S3 server (versitygw on loopback).
func TestDeleteFromS3Storage(t *testing.T) {
	e := newEnvWithStorage(t, s3test.Start(t))
	require.True(t, strings.HasPrefix(e.blobs.URL(), "s3://"), e.blobs.URL())
	e.addBackup("nightly", items(60), archivetest.Options{PreferredVersionCopies: true}, nil)
	lock := filepath.Join(e.blockDir, "item-8.lock")
	require.NoError(t, os.WriteFile(lock, nil, 0o600))

	rep, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey("nightly"))
	require.NoError(t, err, "the tarball stays in S3 while an item is blocked")

	require.NoError(t, os.Remove(lock))
	rep, err = e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	e.requirePurged("nightly")
	require.Len(t, e.lines(), 60*2+20)
}

// TestLabelSelectorsMatchPerItem: a plugin selecting on labels gets exactly
// the labelled items (labels are parsed only when some plugin needs them).
func TestLabelSelectorsMatchPerItem(t *testing.T) {
	t.Setenv("LETHE_RECORD_LABELLED", "1")
	e := newEnv(t)
	specs := items(40)
	for i := range specs {
		if i%4 == 0 {
			specs[i].Labels = map[string]string{"tier": "db"}
		} else if i%4 == 1 {
			specs[i].Labels = map[string]string{"tier": "web"}
		}
	}
	e.addBackup("labelled", specs, archivetest.Options{}, nil)
	rep, err := e.del.Delete(e.ctx, "labelled", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	var got []string
	for _, l := range e.lines() {
		if name, key, _ := strings.Cut(l, "\t"); name == "test.lethe.io/d-labelled" {
			got = append(got, key)
		}
	}
	var want []string
	for i, s := range specs {
		if i%4 == 0 {
			want = append(want, s.Key())
		}
	}
	require.ElementsMatch(t, want, got)
}

// TestForcePurgeOfAStuckDeletion is DESIGN §7.1's escape hatch: an item
// that never succeeds keeps the backup until the operator forces the
// purge, which is audited with what was abandoned.
func TestForcePurgeOfAStuckDeletion(t *testing.T) {
	e := newEnv(t)
	e.addBackup("stuck", items(12), archivetest.Options{}, nil)
	require.NoError(t, os.WriteFile(filepath.Join(e.blockDir, "item-4.fail"), nil, 0o600))

	// --force on an Active backup only skips the grace window.
	rep, err := e.del.Delete(e.ctx, "stuck", deletion.Options{Force: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	stuck, n, err := e.del.Stuck(e.ctx, "stuck")
	require.NoError(t, err)
	require.True(t, stuck)
	require.Equal(t, 1, n)

	rep, err = e.del.Delete(catalog.WithActor(e.ctx, "cli:alice"), "stuck", deletion.Options{Force: true, ForcePurge: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.True(t, rep.Forced)
	require.Equal(t, 1, rep.UnsettledCount)
	e.requirePurged("stuck")
	entries, err := e.store.ListAudit(e.ctx, catalog.AuditFilter{Kind: backup.Kind, Name: "stuck"})
	require.NoError(t, err)
	// The purge is the last lifecycle entry; the retry queue then says
	// the backup's queued items were abandoned (internal/retry).
	last := entries[len(entries)-2]
	require.Equal(t, "force-purge", last.Action)
	require.Equal(t, "retry-abandoned", entries[len(entries)-1].Action)
	require.Equal(t, "cli:alice", entries[len(entries)-1].Actor)
	require.Equal(t, "cli:alice", last.Actor)
	require.Contains(t, string(last.Details), "item-4")
}

// TestItemFailingAtAnotherPluginLeavesOneRow: an item that failed at
// a-first, then (fixed there) fails at b-second, has one unsettled row, not
// two, and once fixed every plugin's count is exact.
func TestItemFailingAtAnotherPluginLeavesOneRow(t *testing.T) {
	e := newEnv(t)
	e.addBackup("moving", items(9), archivetest.Options{}, nil)
	failA := filepath.Join(e.blockDir, "item-2.fail")
	failB := filepath.Join(e.blockDir, "item-2.fail-b")
	require.NoError(t, os.WriteFile(failA, nil, 0o600))
	rep, err := e.del.Delete(e.ctx, "moving", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, pluginA, rep.Unsettled[0].Plugin)

	require.NoError(t, os.Remove(failA))
	require.NoError(t, os.WriteFile(failB, nil, 0o600))
	rep, err = e.del.Delete(e.ctx, "moving", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	require.Equal(t, 1, rep.UnsettledCount)
	require.Equal(t, pluginB, rep.Unsettled[0].Plugin)
	_, n, err := e.del.Stuck(e.ctx, "moving")
	require.NoError(t, err)
	require.Equal(t, 1, n, "one unsettled row for one item")

	require.NoError(t, os.Remove(failB))
	rep, err = e.del.Delete(e.ctx, "moving", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.EqualValues(t, 9, rep.Counts[pluginA].Done)
	require.EqualValues(t, 9, rep.Counts[pluginB].Done)
	require.Zero(t, rep.Counts[pluginA].Failed+rep.Counts[pluginB].Failed)
}

// TestTimerDoesNotDeleteAnUndeletedBackup: the grace-window timer's request
// (OnlyIfScheduled) leaves a backup that was undeleted after it was listed.
func TestTimerDoesNotDeleteAnUndeletedBackup(t *testing.T) {
	e := newEnv(t)
	e.addBackup("saved", items(3), archivetest.Options{}, nil)
	d := time.Minute
	_, err := e.del.Delete(e.ctx, "saved", deletion.Options{Delay: &d})
	require.NoError(t, err)
	e.now = e.now.Add(2 * time.Minute)                                    // due; the timer lists it...
	_, err = e.del.Undelete(catalog.WithActor(e.ctx, "cli:bob"), "saved") // ...and the user undeletes it
	require.NoError(t, err)

	rep, err := e.del.Delete(catalog.WithActor(e.ctx, "softdelete"), "saved", deletion.Options{OnlyIfScheduled: true, Async: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultNotScheduled, rep.Result)
	r, err := e.store.Get(e.ctx, backup.Key("saved"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)
	require.Empty(t, e.lines())
}

// TestForcePurgeWhenTheTarballIsGone: a Deleting backup whose tarball
// vanished (removed outside Lethe, or a crash between removing it and
// purging the record) is stuck until forced, and then purged.
func TestForcePurgeWhenTheTarballIsGone(t *testing.T) {
	e := newEnv(t)
	e.addBackup("gone", items(6), archivetest.Options{}, nil)
	require.NoError(t, os.WriteFile(filepath.Join(e.blockDir, "item-1.fail"), nil, 0o600))
	rep, err := e.del.Delete(e.ctx, "gone", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	require.NoError(t, e.blobs.Delete(e.ctx, backup.StorageKey("gone")))

	_, err = e.del.Delete(e.ctx, "gone", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrTarballMissing)
	stuck, _, err := e.del.Stuck(e.ctx, "gone")
	require.NoError(t, err)
	require.True(t, stuck)

	rep, err = e.del.Delete(e.ctx, "gone", deletion.Options{Force: true, ForcePurge: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.True(t, rep.Forced)
	require.Equal(t, 1, rep.UnsettledCount)
	e.requirePurged("gone")
}

func nsOfThisProcess(t *testing.T) string {
	t.Helper()
	link, err := os.Readlink("/proc/self/ns/pid")
	require.NoError(t, err)
	return strings.TrimSuffix(strings.TrimPrefix(link, "pid:["), "]")
}
