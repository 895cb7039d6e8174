package e2e

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/faults"
)

// TestFaultMixedLosesNothing is issue 28's run that mixes the faults:
// three `lethe server` replicas reach PostgreSQL through a TCP proxy and
// their storage (versitygw) through an S3 fault proxy, with a plugin that
// crashes on one item in five, under load and with a cascade in flight.
// Faults then strike one after another, in a random order with random
// gaps (the seed is logged; LETHE_FAULTS_SEED replays it): the database
// cut, then slow; S3 failing, then cutting downloads; the leader frozen
// with SIGSTOP. The checker then finds every backup purged exactly once,
// every item delivered to every plugin, nothing purged with unfinished
// calls, no block bypassed, nothing left in the bucket, and no replica
// exited.
func TestFaultMixedLosesNothing(t *testing.T) {
	faultsParallel(t)
	admin := os.Getenv("LETHE_TEST_POSTGRES_URL")
	faultsNeed(t, admin == "", "set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	if _, err := s3test.FindBinary(); err != nil {
		faultsNeed(t, true, err.Error())
	}
	var (
		backups  = pick(6, 40)
		items    = pick(20, 60)
		snaps    = pick(40, 100000)
		each     = pick(4*time.Second, 15*time.Second)
		loadTime = pick(15*time.Second, 90*time.Second)
		deadline = pick(4*time.Minute, 30*time.Minute)
	)
	const leases = 3 * time.Second
	const crashy = "test.lethe.io/c-crashy"
	rnd := faultRand(t)

	store := createDatabase(t, admin)
	u, err := url.Parse(store)
	require.NoError(t, err)
	pgProxy, err := faults.NewTCPProxy(u.Host)
	require.NoError(t, err)
	defer pgProxy.Close()
	pu := *u
	pu.Host = pgProxy.Addr
	q := pu.Query()
	q.Set("connect_timeout", "5")
	pu.RawQuery = q.Encode()
	srv := s3test.StartServer(t)
	s3 := s3test.NewProxy(t, srv)

	e := newEnv(t, pluginFleet)
	copyFile(t, filepath.Join(bin, pluginFleet), filepath.Join(e.pluginDir(), "crashrec"), 0o750)
	e.extra = append(e.extra, "LETHE_STORE="+store, "LETHE_STORAGE="+s3.URL,
		"LETHE_PLUGIN_ENV="+pluginFleet+":LETHE_RECORD_FILE="+e.record+"\n"+pluginFleet+":"+noPluginsEnv+"\ncrashrec:"+noPluginsEnv+
			"\ncrashrec:LETHE_RECORD_FILE="+e.record+"\ncrashrec:LETHE_RECORD_PLUGINS="+crashy+"\ncrashrec:LETHE_RECORD_CRASH_EVERY=5"+
			"\ncrashrec:LETHE_RECORD_CRASH_DIR="+t.TempDir())
	e.ok("migrate")
	e.ok("plugin", "lock")
	f := newFaultRun(t, e)
	f.served = []string{"LETHE_STORE=" + pu.String()}

	ctx, cancel := context.WithTimeout(catalog.WithActor(context.Background(), "fault-test"), deadline)
	defer cancel()
	st, err := drivers.Open(ctx, store, &catalog.Config{})
	require.NoError(t, err)
	defer st.Close()

	deps := cascadeOf(ctx, t, e, st, items, snaps)
	for _, n := range []string{"r1", "r2", "r3"} {
		f.startReplica(n, "--workers", "2", "--lease-ttl", leases.String(), "--leader-lease-ttl", leases.String(),
			"--poll-interval", "1s", "--retry-backoff", "1s")
	}
	for _, r := range f.replicas {
		waitReady(ctx, t, r)
	}
	waitLoad := f.load("mix", backups, items, time.Second, loadTime)
	for len(f.registered()) == 0 || !purgedAny(ctx, st, f.registered()) {
		f.requireAllRunning()
		require.True(t, sleepCtx(ctx, 100*time.Millisecond), "no purge before the faults")
	}
	e.ok("backup", "delete", "cascade", "--yes", "--async")

	strikes := []struct {
		name string
		do   func()
	}{
		{"PostgreSQL cut, then +200 ms", func() {
			pgProxy.Cut()
			require.True(t, sleepCtx(ctx, each))
			pgProxy.SetLatency(200 * time.Millisecond)
			pgProxy.Restore()
			require.True(t, sleepCtx(ctx, each/2))
			pgProxy.SetLatency(0)
		}},
		{"S3 failing, then cutting downloads", func() {
			s3.FailUntil(time.Now().Add(each))
			require.True(t, sleepCtx(ctx, each))
			s3.CutNextGETs(1000, 1000, 5000)
		}},
		{"the leader frozen (SIGSTOP)", func() {
			l := waitLeader(ctx, t, st, "")
			r := replicaOf(t, f.replicas, l.Holder)
			require.NoError(t, r.p.cmd.Process.Signal(syscall.SIGSTOP))
			defer func() { require.NoError(t, r.p.cmd.Process.Signal(syscall.SIGCONT)) }()
			require.True(t, sleepCtx(ctx, each))
		}},
	}
	rnd.Shuffle(len(strikes), func(i, j int) { strikes[i], strikes[j] = strikes[j], strikes[i] })
	var ended []time.Time
	for _, s := range strikes {
		require.True(t, sleepCtx(ctx, time.Duration(rnd.Int64N(int64(3*time.Second)))))
		t.Logf("fault: %s, from %s", s.name, time.Now().Format(time.StampMilli))
		s.do()
		ended = append(ended, time.Now())
		f.requireAllRunning()
	}

	waitLoad()
	names := f.registered()
	require.Len(t, names, backups)
	f.waitPurged(ctx, st, append(names, "cascade"))
	done := time.Now()
	messages := f.stop()
	t.Logf("log messages: %v", messages)

	db, err := sql.Open("pgx", store)
	require.NoError(t, err)
	defer db.Close()
	itemsOf := map[string]int{"cascade": items}
	for _, n := range names {
		itemsOf[n] = f.items[n]
	}
	rep := f.check(ctx, db, faults.Expect{
		Backups: append(names, "cascade"), Items: itemsOf,
		Plugins:    []string{"test.lethe.io/a-first", "test.lethe.io/b-second", crashy},
		Dependents: map[string][]string{"cascade": deps},
		StorageDir: filepath.Join(srv.Dir, s3test.Bucket), Record: e.record,
	})
	last := ended[len(ended)-1]
	first, ok := recovery(rep.PurgedAt, last)
	if !ok {
		// Every backup was purged (the checker says so) before the
		// last fault ended: the short run's few backups can all be done
		// while the faults go on. Nothing to measure after it.
		t.Logf("FIGURE mixed: %d faults in a row (%s each), %d plugin crashes; all %d purged before the last fault ended",
			len(strikes), each, rep.Crashes, len(rep.PurgedAt))
		return
	}
	t.Logf("FIGURE mixed: %d faults in a row (%s each), %d plugin crashes; first purge %s after the last ended; %.2f purges/s after; all %d purged %s after it",
		len(strikes), each, rep.Crashes, first.Round(time.Millisecond), rate(rep.PurgedAt, last, done), len(rep.PurgedAt), done.Sub(last).Round(time.Second))
}
