package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// TestBackupCascadeCrashResume: `lethe delete backup NAME --wait` on a
// Backup owning VolumeSnapshots with blockOwnerDeletion is SIGKILLed at
// random points (in its items, in its dependents' plugins, around its
// purge); the next run resumes. At every kill, nothing of the backup (its
// tarball, its record) is purged before every blocking dependent is, and
// nothing is purged twice; in the end everything is purged and every
// plugin ran on every snapshot and every item of the backup.
func TestBackupCascadeCrashResume(t *testing.T) {
	t.Parallel()
	const (
		items    = 1000
		snaps    = 1500
		minKills = 5
	)
	e := newEnv(t, pluginRecorder)
	e.create("b", items)
	ctx := catalog.WithActor(context.Background(), "test")
	url := "sqlite://" + filepath.Join(e.home, "lethe.db")
	st, err := drivers.Open(ctx, url, nil)
	require.NoError(t, err)
	bk, err := st.Get(ctx, catalog.Key{Kind: "Backup", Name: "b"})
	require.NoError(t, err)
	all := map[string]*catalog.Resource{}
	for i := range snaps {
		r, err := st.Create(ctx, &catalog.Resource{Kind: "VolumeSnapshot", Namespace: "prod", Name: fmt.Sprintf("s-%d", i),
			Owners: []catalog.OwnerRef{{UID: bk.UID, Kind: "Backup", Name: "b", BlockOwnerDeletion: true}}})
		require.NoError(t, err)
		all[r.UID] = r
	}
	require.NoError(t, st.Close())

	// Bytes of record one full run writes, about: a line per plugin and
	// item or snapshot.
	fullRun := int64(items*2*60 + items/7*60 + snaps*2*60)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (kill points are random)", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	args := []string{"delete", "backup", "b", "--yes", "--wait"}
	kills := 0
	for attempt := 0; kills < minKills; attempt++ {
		require.Less(t, attempt, 3*minKills, "could not kill lethe mid-cascade %d times", minKills)
		// Kill on the record's growth (a plugin's progress), now and then
		// at a random time instead (startup, the purge).
		before := fileSize(e.record)
		remaining := max(fullRun-before, 2)
		growth := 1 + rng.Int64N(max(remaining/(minKills+1-int64(kills)), 2))
		delay := cmdTimeout
		if rng.IntN(4) == 0 {
			delay = time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))
		}
		p := e.start(args...)
		started := time.Now()
		for i := 0; i < 20000 && !p.exited(); i++ {
			if time.Since(started) >= delay || fileSize(e.record)-before >= growth {
				break
			}
			time.Sleep(time.Millisecond)
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		r := p.wait(t)
		if !p.killedBySIGKILL() {
			t.Fatalf("lethe ended on its own before being killed (kill %d)\n%s", kills+1, r)
		}
		kills++
		left := waitNoPluginProcs(e.pluginDir(), 10*time.Second)
		killPluginProcs(t, e.pluginDir())
		require.Empty(t, left, "plugin processes %v outlived the SIGKILLed lethe by 10s", left)
		t.Logf("kill %d after %v: record +%d bytes (trigger %v or +%d)", kills, time.Since(started).Round(time.Millisecond), fileSize(e.record)-before, delay, growth)
		e.checkBackupCascade(url, bk, all, false)
	}
	r := e.run(args...)
	require.Contains(t, []int{0, 4}, r.code, "%s", r)
	e.checkBackupCascade(url, bk, all, true)
	e.requirePurged("b")

	seen := uniq(readLines(t, e.record))
	for _, s := range all {
		for _, pl := range []string{recFirst, recSecond} {
			require.True(t, seen[pl+"\tvolumesnapshots/prod/"+s.Name], "plugin %s never ran on %s", pl, s.Key())
		}
	}
	got := e.readRecord()
	require.Len(t, got[recFirst], items+snaps, "every item of the backup and every snapshot reached %s", recFirst)
}

// checkBackupCascade reads the catalog and the storage: the backup's
// tarball and record are gone only after every snapshot was purged, each
// purge happened once; with done, everything is gone.
func (e *env) checkBackupCascade(url string, bk *catalog.Resource, snaps map[string]*catalog.Resource, done bool) {
	t := e.t
	t.Helper()
	ctx := context.Background()
	st, err := drivers.Open(ctx, url, nil)
	require.NoError(t, err)
	defer st.Close()
	es, err := st.ListAudit(ctx, catalog.AuditFilter{})
	require.NoError(t, err)
	purged := map[string]int64{}
	for _, a := range es {
		if a.Action != "purge" && a.Action != "force-purge" {
			continue
		}
		require.Equal(t, "purge", a.Action, "%s/%s was force-purged", a.Kind, a.Name)
		_, twice := purged[a.UID]
		require.False(t, twice, "%s/%s purged twice", a.Kind, a.Name)
		purged[a.UID] = a.ID
	}
	_, statErr := os.Stat(e.tarballPath("b"))
	tarballGone := os.IsNotExist(statErr)
	bid, backupGone := purged[bk.UID]
	if tarballGone || backupGone {
		for uid, s := range snaps {
			sid, ok := purged[uid]
			require.True(t, ok, "the backup's tarball or record was purged before its blocking dependent %s", s.Key())
			if backupGone {
				require.Less(t, sid, bid, "%s purged before its blocking dependent %s", bk.Key(), s.Key())
			}
		}
	}
	if done {
		require.True(t, backupGone && tarballGone, "the backup is purged")
		require.Len(t, purged, len(snaps)+1)
	}
}
