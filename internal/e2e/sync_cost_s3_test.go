package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// syncCostBackupsEnv sets how many backups TestSyncCostOnS3ThroughBinary
// lays out: 500 by default (6,000 objects, 6 LIST pages), 10,000 for
// issue 24 point 2's figure (README, Performance), which takes minutes.
const syncCostBackupsEnv = "LETHE_SYNC_COST_BACKUPS"

// TestSyncCostOnS3ThroughBinary is issue 24 point 2's measurement on S3
// (versitygw), counted in HTTP requests by a proxy in front of it: a
// bucket of n Velero 1.18 backups (12 objects each), imported once;
// then `lethe backup sync` and one sync tick of `lethe server`, each with
// one new backup, make the LIST pages of the bucket (1,000 keys each),
// plus the one-key listing that checks the location answers, and the 3
// GETs of the new backup (velero-backup.json, the tarball, the snapshot
// list): nothing per known backup. A sync where nothing changed makes the
// LIST pages only.
func TestSyncCostOnS3ThroughBinary(t *testing.T) {
	t.Parallel()
	if _, err := s3test.FindBinary(); err != nil {
		t.Skip(err)
	}
	n := 500
	if v := os.Getenv(syncCostBackupsEnv); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, syncCostBackupsEnv)
	}
	srv := s3test.StartServer(t)
	proxy := s3test.NewProxy(t, srv)
	// Velero's files are written into versitygw's posix backend directly
	// (one file per object, as a PUT leaves them): 130,000 PUTs would
	// take minutes and measure nothing.
	// The backups are fresh (created now, Velero's TTL of 30 days), so
	// that the server's TTL controller deletes none of them meanwhile.
	bucketDir := filepath.Join(srv.Dir, s3test.Bucket)
	created := time.Now().UTC().Truncate(time.Second)
	write := func(name string) int {
		files := velerotest.Backup(name)
		obj := velerotest.BackupObject(name)
		obj["metadata"].(map[string]any)["creationTimestamp"] = created.Format(time.RFC3339)
		st := obj["status"].(map[string]any)
		st["startTimestamp"], st["completionTimestamp"] = created.Format(time.RFC3339), created.Format(time.RFC3339)
		st["expiration"] = created.Add(velerotest.TTL).Format(time.RFC3339)
		meta, err := json.Marshal(obj)
		require.NoError(t, err)
		files[velero.MetadataKey(name)] = meta
		require.NoError(t, velerotest.WriteDir(bucketDir, files))
		return len(files)
	}
	objects := 0
	for i := range n {
		objects += write(fmt.Sprintf("b-%05d", i))
	}
	pages := func(objects int) int { return (objects + 999) / 1000 }

	e := newEnv(t, pluginNoop)
	e.ok("plugin", "lock") // lethe server runs pinned plugins only
	e.extra = append(e.extra, "LETHE_STORAGE="+proxy.URL)
	began := time.Now()
	// The first import reads every backup: minutes at 10,000 on a busy
	// machine, past cmdTimeout.
	first := e.startLong(30*time.Minute, "backup", "sync").wait(t)
	require.Equal(t, 0, first.code, "%s", first)
	t.Logf("first sync of %d backups (%d objects) through the proxy: %s, %d LIST pages, %d GETs",
		n, objects, time.Since(began).Round(time.Millisecond), proxy.LISTs(), len(proxy.GETs()))

	// Nothing new: the LIST pages and the location's check, no GET.
	proxy.Reset()
	e.ok("backup", "sync")
	require.Equal(t, pages(objects)+1, proxy.LISTs(), "LIST requests of `backup sync` where nothing changed: the pages and the location's check")
	require.Empty(t, proxy.GETs(), "GETs of `backup sync` where nothing changed")

	// One new backup, through `lethe backup sync`.
	perBackup := write("new-cli")
	objects += perBackup
	proxy.Reset()
	r := e.ok("backup", "sync")
	require.Regexp(t, `new-cli\s+.*imported`, r.stdout)
	cliLists, cliGets := proxy.LISTs(), len(proxy.GETs())
	require.Equal(t, pages(objects)+1, cliLists, "LIST requests of `backup sync` with one new backup among %d", n)
	require.Equal(t, 3, cliGets, "GETs of `backup sync` with one new backup: velero-backup.json, the tarball, the snapshot list")

	// One new backup, through a sync tick of `lethe server`: each tick's
	// requests are those between two increments of its sync counter.
	metrics := freePort(t)
	p := e.startLong(10*time.Minute, "server", "--sync-interval", "3s", "--metrics-addr", metrics)
	syncs := func() float64 { return scrapeMetric(t, metrics, `lethe_storage_syncs_total{result="ok"}`) }
	eventually(t, p, 5*time.Minute, "the server's first sync tick", func() bool { return syncs() >= 1 })
	proxy.Reset()
	objects += write("new-server")
	type tick struct{ lists, gets int }
	var ticks []tick
	last := syncs()
	eventually(t, p, 5*time.Minute, "a server sync tick imported backup new-server", func() bool {
		if now := syncs(); now > last {
			last = now
			ticks = append(ticks, tick{proxy.LISTs(), len(proxy.GETs())})
			proxy.Reset()
			return ticks[len(ticks)-1].gets > 0
		}
		return false
	})
	e.ok("backup", "get", "new-server")
	tk := ticks[len(ticks)-1]
	require.Equal(t, pages(objects)+1, tk.lists, "LIST requests of a server sync tick with one new backup among %d (ticks %v)", n, ticks)
	require.Equal(t, 3, tk.gets, "GETs of a server sync tick with one new backup (ticks %v)", ticks)
	for _, o := range ticks[:len(ticks)-1] {
		require.Zero(t, o.gets, "a tick before the new backup was listed reads nothing (ticks %v)", ticks)
	}
	t.Logf("S3, %d backups (%d objects) + 1 new: backup sync %d LIST, %d GET; server sync tick %d LIST, %d GET",
		n, objects-2*perBackup, cliLists, cliGets, tk.lists, tk.gets)
}
