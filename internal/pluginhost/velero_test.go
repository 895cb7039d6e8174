package pluginhost

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

var (
	veleroBinOnce sync.Once
	veleroBin     string
	veleroBinErr  error
)

// buildVeleroPlugin builds testdata/veleroplugin, a DeleteItemAction
// plugin built against Velero's own framework (v1.18.1) in a module of its
// own, once per test binary. The first build downloads Velero's module
// through the module proxy and takes minutes; later ones are cached.
func buildVeleroPlugin(t testing.TB) string {
	t.Helper()
	veleroBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lethe-velero-plugin-")
		if err != nil {
			veleroBinErr = err
			return
		}
		veleroBin = filepath.Join(dir, "velero-recorder")
		cmd := exec.Command("go", "build", "-o", veleroBin, ".")
		cmd.Dir = "testdata/veleroplugin"
		if out, err := cmd.CombinedOutput(); err != nil {
			veleroBinErr = &buildError{out: string(out), err: err}
		}
	})
	require.NoError(t, veleroBinErr, "building the Velero plugin (testdata/veleroplugin)")
	return veleroBin
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// veleroHost starts a host with an empty Lethe plugin folder and a Velero
// plugin folder holding the recording plugin.
func veleroHost(t *testing.T, cfg *Config) (*Host, string) {
	t.Helper()
	bin := buildVeleroPlugin(t)
	vdir := pluginDir(t)
	require.NoError(t, os.Link(bin, filepath.Join(vdir, "velero-recorder")))
	record := filepath.Join(t.TempDir(), "record.tsv")
	c := *cfg
	c.Dir = pluginDir(t)
	c.VeleroDir = vdir
	c.PluginEnv = map[string]map[string]string{"velero-recorder": {"VELERO_RECORD_FILE": record, "VELERO_FAIL_ITEM": "doomed"}}
	h, err := New(&c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h, record
}

// TestVeleroPluginIsDiscoveredWithItsProtocol is issue 14 point 4: an
// unmodified Velero DeleteItemAction binary in the Velero plugin folder
// is handshaken (VELERO_PLUGIN/hello, protocol 2), its DeleteItemAction
// plugins listed through PluginLister with their AppliesTo selectors, and
// ordered by name with the others.
func TestVeleroPluginIsDiscoveredWithItsProtocol(t *testing.T) {
	h, _ := veleroHost(t, &Config{})
	require.Empty(t, h.Problems())
	infos := h.Plugins()
	require.Len(t, infos, 2)
	require.Equal(t, "example.io/pvs", infos[0].Name)
	require.Equal(t, "example.io/recorder", infos[1].Name)
	for _, in := range infos {
		require.Equal(t, ProtocolVelero, in.Protocol)
		require.Equal(t, VeleroProtocolVersion, in.ProtocolVersion)
		require.Equal(t, VeleroMaxConcurrency, in.MaxConcurrency)
	}
	require.Equal(t, []string{"configmaps", "secrets"}, infos[1].Selector.IncludedResources)
	require.True(t, infos[1].Matcher.MatchesResource("configmaps", "configmaps", "shop"))
	require.False(t, infos[1].Matcher.MatchesResource("pods", "pods", "shop"))
}

func itemJSON(kind, ns, name string) []byte {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"namespace": ns, "name": name}})
	return b
}

// TestVeleroPluginExecutesWithVelerosRequestShape: items reach the Velero
// plugin as Velero sends them (the item's JSON and a velero.io/v1 Backup
// JSON), the environment configured for the binary reaches it, and an
// error from Execute is a failed item.
func TestVeleroPluginExecutesWithVelerosRequestShape(t *testing.T) {
	h, record := veleroHost(t, &Config{})
	ctx := context.Background()
	created := time.Date(2026, 4, 12, 3, 0, 0, 0, time.UTC)
	s, err := h.OpenSession(ctx, "example.io/recorder", plugin.Backup{
		Name: "nightly-0412", UID: "u-1", Labels: map[string]string{"app": "shop", "velero.io/storage-location": "default"},
		CreatedAt: created, ExpiresAt: created.Add(720 * time.Hour), StorageLocation: "file:///somewhere",
	}, SessionOptions{})
	require.NoError(t, err)
	items := []plugin.Item{
		{Resource: "configmaps", Kind: "ConfigMap", Version: "v1", Namespace: "shop", Name: "settings", Object: itemJSON("ConfigMap", "shop", "settings")},
		{Resource: "secrets", Kind: "Secret", Version: "v1", Namespace: "shop", Name: "db", Object: itemJSON("Secret", "shop", "db")},
		{Resource: "configmaps", Kind: "ConfigMap", Version: "v1", Namespace: "shop", Name: "doomed", Object: itemJSON("ConfigMap", "shop", "doomed")},
	}
	go func() {
		for i, it := range items {
			_ = s.Send(ctx, Item{ID: uint64(i + 1), Item: it})
		}
		s.CloseSend()
	}()
	got := map[uint64]Result{}
	for r := range s.Results() {
		got[r.ID] = r
	}
	require.Len(t, got, 3)
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome, got[1].Message)
	require.Equal(t, plugin.OutcomeDone, got[2].Outcome, got[2].Message)
	require.Equal(t, plugin.OutcomeFailed, got[3].Outcome)
	require.Contains(t, got[3].Message, "refusing to delete shop/doomed on purpose")

	data, err := os.ReadFile(record)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	// No velero-backup.json given: the Backup is built, without
	// spec.includedNamespaces (the last column).
	require.ElementsMatch(t, []string{
		"example.io/recorder\tConfigMap\tshop/settings\tnightly-0412\tdefault\tshop\t",
		"example.io/recorder\tSecret\tshop/db\tnightly-0412\tdefault\tshop\t",
	}, lines)
}

// TestABuiltVeleroBackupNamesItsLocationNotAURL: a backup without
// velero-backup.json or Velero's storage-location label gets, in the
// Backup built for a Velero plugin, its location's name as
// spec.storageLocation (a BackupStorageLocation name), never the
// tarball's URL.
func TestABuiltVeleroBackupNamesItsLocationNotAURL(t *testing.T) {
	h, record := veleroHost(t, &Config{})
	ctx := context.Background()
	s, err := h.OpenSession(ctx, "example.io/recorder", plugin.Backup{
		Name: "no-metadata", UID: "u-2", StorageLocation: "file:///srv/bucket/backups/no-metadata/no-metadata.tar.gz",
	}, SessionOptions{VeleroLocation: "far"})
	require.NoError(t, err)
	go func() {
		_ = s.Send(ctx, Item{ID: 1, Item: plugin.Item{Resource: "configmaps", Kind: "ConfigMap", Version: "v1", Namespace: "shop", Name: "settings", Object: itemJSON("ConfigMap", "shop", "settings")}})
		s.CloseSend()
	}()
	for r := range s.Results() {
		require.Equal(t, plugin.OutcomeDone, r.Outcome, r.Message)
	}
	data, err := os.ReadFile(record)
	require.NoError(t, err)
	require.Equal(t, "example.io/recorder\tConfigMap\tshop/settings\tno-metadata\tfar\t\t\n", string(data))
}

// TestVeleroPluginHonoursTheLockFile: a Velero binary that its folder's
// lock file does not pin is refused before it runs, as a Lethe one is.
func TestVeleroPluginHonoursTheLockFile(t *testing.T) {
	bin := buildVeleroPlugin(t)
	vdir := pluginDir(t)
	require.NoError(t, os.Link(bin, filepath.Join(vdir, "velero-recorder")))
	lockDir := t.TempDir()
	// A lock file that pins another folder's content: the recorder is not in it.
	other := pluginDir(t)
	lock := filepath.Join(lockDir, "velero.lock")
	_, err := WriteLock(other, lock)
	require.NoError(t, err)
	h, err := New(&Config{Dir: pluginDir(t), VeleroDir: vdir, VeleroLockFile: lock})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	require.Empty(t, h.Plugins())
	require.Len(t, h.Problems(), 1)
	require.ErrorContains(t, h.Problems()[0].Err, "is not in the lock file")

	// Locked: it runs, from the sealed copy.
	_, err = WriteLock(vdir, lock)
	require.NoError(t, err)
	h2, err := New(&Config{Dir: pluginDir(t), VeleroDir: vdir, VeleroLockFile: lock})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h2.Close() })
	require.Empty(t, h2.Problems())
	require.Len(t, h2.Plugins(), 2)
	require.Equal(t, ChecksumLocked, h2.Plugins()[0].ChecksumStatus)
}

// TestDeletingOneLockFileLetsNoUnpinnedBinaryRun: pinning is all or
// nothing. With Lethe's plugins pinned (the lock kept elsewhere), deleting
// the Velero plugins' lock file fails the start instead of letting the
// Velero binary run unpinned; and the other way round.
func TestDeletingOneLockFileLetsNoUnpinnedBinaryRun(t *testing.T) {
	bin := buildVeleroPlugin(t)
	locks := t.TempDir()
	dir, vdir := pluginDir(t), pluginDir(t)
	addScript(t, dir, "plugin-a")
	require.NoError(t, os.Link(bin, filepath.Join(vdir, "velero-recorder")))
	cfg := &Config{Dir: dir, LockFile: filepath.Join(locks, "lethe.lock"), VeleroDir: vdir, VeleroLockFile: filepath.Join(locks, "velero.lock")}
	_, err := WriteLock(dir, cfg.LockFile)
	require.NoError(t, err)
	_, err = WriteLock(vdir, cfg.VeleroLockFile)
	require.NoError(t, err)
	h := newHost(t, cfg)
	require.Empty(t, h.Problems())
	require.Len(t, h.Plugins(), 3)

	require.NoError(t, os.Remove(cfg.VeleroLockFile))
	_, err = New(cfg)
	require.ErrorContains(t, err, "plugin lock file "+cfg.VeleroLockFile+" of the Velero plugins does not exist, while "+cfg.LockFile+" pins Lethe's plugins")

	_, err = WriteLock(vdir, cfg.VeleroLockFile)
	require.NoError(t, err)
	require.NoError(t, os.Remove(cfg.LockFile))
	_, err = New(cfg)
	require.ErrorContains(t, err, "plugin lock file "+cfg.LockFile+" does not exist, while "+cfg.VeleroLockFile+" pins the Velero plugins")

	// Neither pinned: both run, as before any lock (unless one is required).
	require.NoError(t, os.Remove(cfg.VeleroLockFile))
	h = newHost(t, cfg)
	require.Len(t, h.Plugins(), 3)
	cfg.RequireLock = true
	_, err = New(cfg)
	require.ErrorContains(t, err, "a lock is required")
}

// TestARequiredLockIsNotNeededWhereNoBinaryWouldRun: RequireLock refuses
// a missing lock file only when its folder holds binaries.
func TestARequiredLockIsNotNeededWhereNoBinaryWouldRun(t *testing.T) {
	locks := t.TempDir()
	h := newHost(t, &Config{Dir: pluginDir(t), LockFile: filepath.Join(locks, "l"), VeleroDir: pluginDir(t), VeleroLockFile: filepath.Join(locks, "v"), RequireLock: true})
	require.Empty(t, h.Plugins())
	require.Empty(t, h.Problems())
}
