package e2e

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/faults"
)

// TestFaultS3ErrorsAndCutStreamsPurgeOnlyWhatWasRead is issue 28's "S3
// faults": one `lethe server` on SQLite reaches its storage (versitygw)
// through a fault proxy, under load (backups expiring every few hundred
// milliseconds). The proxy answers every request with 500
// InternalError, 503 ServiceUnavailable or 503 SlowDown for a while
// (10 s, 30 s under LETHE_FAULTS=full), then cuts the next downloads
// mid-tarball. Deletions resume (the cut ones with ranged GETs), the
// replica never exits, and the independent checker finds every backup
// purged exactly once, each only after every one of its items reached
// both plugins (nothing purged that was not read), and nothing of them
// left in the bucket.
func TestFaultS3ErrorsAndCutStreamsPurgeOnlyWhatWasRead(t *testing.T) {
	faultsParallel(t)
	if _, err := s3test.FindBinary(); err != nil {
		faultsNeed(t, true, err.Error())
	}
	var (
		backups  = pick(10, 60)
		items    = pick(300, 600)
		fail     = pick(10*time.Second, 30*time.Second)
		loadTime = pick(15*time.Second, 60*time.Second)
		deadline = pick(3*time.Minute, 10*time.Minute)
	)
	srv := s3test.StartServer(t)
	proxy := s3test.NewProxy(t, srv)

	e := newEnv(t, pluginFleet)
	// Every lethe process, the load's included, reaches the storage
	// through the proxy: a backup's location is its storage URL.
	e.extra = append(e.extra, "LETHE_STORAGE="+proxy.URL,
		"LETHE_PLUGIN_ENV="+pluginFleet+":LETHE_RECORD_FILE="+e.record)
	e.ok("plugin", "lock")
	f := newFaultRun(t, e)

	ctx, cancel := context.WithTimeout(catalog.WithActor(context.Background(), "fault-test"), deadline)
	defer cancel()
	r := f.startReplica("r1", "--workers", "2", "--poll-interval", "1s")
	waitReady(ctx, t, r)
	waitLoad := f.load("s3", backups, items, time.Second, loadTime)

	st := e.catalog()
	for len(f.registered()) == 0 || !purgedAny(ctx, st, f.registered()) {
		f.requireAllRunning()
		require.True(t, sleepCtx(ctx, 100*time.Millisecond), "no purge before the fault")
	}
	require.True(t, strikeLater(ctx, t))
	failAt := time.Now()
	proxy.FailUntil(failAt.Add(fail))
	t.Logf("S3 fails every request for %s from %s", fail, failAt.Format(time.StampMilli))
	require.True(t, sleepCtx(ctx, fail))
	failEnd := time.Now()
	// Then the next downloads break mid-tarball.
	proxy.CutNextGETs(1000, 1000, 5000)
	f.requireAllRunning()

	waitLoad()
	names := f.registered()
	require.Len(t, names, backups)
	f.waitPurged(ctx, st, names)
	done := time.Now()
	messages := f.stop()
	t.Logf("log messages: %v", messages)
	gets := proxy.GETs()
	ranged := 0
	for _, g := range gets {
		if strings.HasPrefix(g, "bytes=") {
			ranged++
		}
	}
	t.Logf("proxy: %d requests failed on purpose; %d GETs of objects, %d of them ranged (resumed)", proxy.Failed(), len(gets), ranged)
	require.Positive(t, proxy.Failed(), "the fault reached the replica")
	require.Positive(t, ranged, "a download cut mid-tarball resumed with a ranged GET")

	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.home, "lethe.db")+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	rep := f.check(ctx, db, faults.Expect{
		Backups: names, Items: f.items,
		Plugins:    []string{"test.lethe.io/a-first", "test.lethe.io/b-second"},
		StorageDir: filepath.Join(srv.Dir, s3test.Bucket), Record: e.record,
	})
	first, ok := recovery(rep.PurgedAt, failEnd)
	require.True(t, ok, "no purge after the fault")
	t.Logf("FIGURE s3-errors: S3 failing for %s, purged before %d, during %d; first purge %s after it ended; %.2f purges/s after; all %d purged %s after it ended",
		fail, countPurgedBefore(rep.PurgedAt, failAt), countPurgedBefore(rep.PurgedAt, failEnd)-countPurgedBefore(rep.PurgedAt, failAt),
		first.Round(time.Millisecond), rate(rep.PurgedAt, failEnd, done), len(rep.PurgedAt), done.Sub(failEnd).Round(time.Second))
}
