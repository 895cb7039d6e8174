package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/faults"
)

// pgCluster is a PostgreSQL cluster of the test's own (Debian's
// postgresql-common: pg_createcluster), so that restarting it hurts no
// other test.
type pgCluster struct {
	version, name string
	port          string
}

// newPGCluster creates and starts a cluster with trust authentication on
// a free port, dropped at the end of the test; why says what is missing
// where it cannot.
func newPGCluster(t *testing.T) (c *pgCluster, why string) {
	t.Helper()
	if _, err := exec.LookPath("pg_createcluster"); err != nil {
		return nil, "pg_createcluster (postgresql-common) is not installed: " + err.Error()
	}
	out, err := exec.Command("pg_lsclusters", "--no-header").Output()
	if err != nil || len(strings.Fields(string(out))) == 0 {
		return nil, fmt.Sprintf("pg_lsclusters: %v: no PostgreSQL version to create a cluster with", err)
	}
	addr := freeAddr(t)
	c = &pgCluster{version: strings.Fields(string(out))[0], name: fmt.Sprintf("lethe-fault-%d", os.Getpid()), port: addr[strings.LastIndex(addr, ":")+1:]}
	out, err = exec.Command("pg_createcluster", c.version, c.name, "-p", c.port, "--start", "--", "--auth=trust").CombinedOutput()
	if err != nil {
		return nil, fmt.Sprintf("pg_createcluster: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("pg_dropcluster", c.version, c.name, "--stop").CombinedOutput(); err != nil {
			t.Logf("pg_dropcluster %s: %v: %s", c.name, err, out)
		}
	})
	return c, ""
}

func (c *pgCluster) url() string {
	return "postgres://postgres@127.0.0.1:" + c.port + "/postgres?sslmode=disable&connect_timeout=5"
}

// restart restarts the cluster in mode (fast: connections are ended and
// the server shuts down cleanly; immediate: it stops as if it crashed,
// and recovers from its WAL on the way up).
func (c *pgCluster) restart(t *testing.T, mode string) {
	t.Helper()
	out, err := exec.Command("pg_ctlcluster", "-m", mode, c.version, c.name, "restart").CombinedOutput()
	require.NoError(t, err, "pg_ctlcluster restart: %s", out)
}

// TestFaultPostgresRestartedLosesNothing is issue 28's "PostgreSQL
// restarted": three `lethe server` replicas on a PostgreSQL cluster of
// the test's own, under load (backups expiring every few hundred
// milliseconds, a backup owning VolumeSnapshots with blockOwnerDeletion).
// The cluster is restarted while a replica holds a deletion: once with a
// clean shutdown (-m fast), and, under LETHE_FAULTS=full, again as a
// crash (-m immediate, recovering from its WAL) and once more. No replica
// exits, and the checker finds every backup purged exactly once, every
// item delivered, nothing left unfinished, no block bypassed.
func TestFaultPostgresRestartedLosesNothing(t *testing.T) {
	faultsParallel(t)
	modes := pick([]string{"fast"}, []string{"fast", "immediate", "fast"})
	between := pick(3*time.Second, 10*time.Second)
	c, why := newPGCluster(t)
	faultsNeed(t, c == nil, why)
	pgFleetFault(t, "pg-restart", c.url(), func(ctx context.Context, f *faultRun, _ catalog.Store) []time.Time {
		var restarted []time.Time
		for i, mode := range modes {
			if i > 0 {
				require.True(t, sleepCtx(ctx, between))
			}
			began := time.Now()
			c.restart(t, mode)
			restarted = append(restarted, time.Now())
			t.Logf("PostgreSQL restarted (-m %s) in %s", mode, time.Since(began).Round(time.Millisecond))
			f.requireAllRunning()
		}
		return restarted
	})
}

// TestFaultLeaderPausedUnderLoadLosesNothing is issue 28's "the leader
// paused": the same fleet and load on the shared PostgreSQL server; the
// leader is frozen with SIGSTOP (wherever it is, a transaction included)
// for 8 s (20 s under LETHE_FAULTS=full, past every lease), then resumed
// while another replica may lead. Its writes after it resumes meet the
// fences; nothing is lost or done twice, and no replica exits.
func TestFaultLeaderPausedUnderLoadLosesNothing(t *testing.T) {
	faultsParallel(t)
	admin := os.Getenv("LETHE_TEST_POSTGRES_URL")
	faultsNeed(t, admin == "", "set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	pause := pick(8*time.Second, 20*time.Second)
	pgFleetFault(t, "leader-paused", createDatabase(t, admin), func(ctx context.Context, f *faultRun, st catalog.Store) []time.Time {
		l := waitLeader(ctx, t, st, "")
		r := replicaOf(t, f.replicas, l.Holder)
		require.NoError(t, r.p.cmd.Process.Signal(syscall.SIGSTOP))
		t.Logf("SIGSTOPped the leader %s (term %d) for %s", r.name, l.Term, pause)
		resumed := false
		defer func() {
			if !resumed {
				_ = r.p.cmd.Process.Signal(syscall.SIGCONT)
			}
		}()
		require.True(t, sleepCtx(ctx, pause))
		if next, err := st.GetLeader(ctx, "lethe-server"); err == nil {
			t.Logf("leader during the pause: %s (term %d)", next.Holder, next.Term)
		}
		require.NoError(t, r.p.cmd.Process.Signal(syscall.SIGCONT))
		resumed = true
		return []time.Time{time.Now()}
	})
}

// pgFleetFault runs three replicas on the PostgreSQL database store under
// load with a cascade in flight, calls inject (which returns when each
// fault it injected ended), then waits for every purge and runs the
// checker; name heads the FIGURE lines.
func pgFleetFault(t *testing.T, name, store string, inject func(ctx context.Context, f *faultRun, st catalog.Store) []time.Time) {
	var (
		backups  = pick(10, 60)
		items    = pick(30, 60)
		snaps    = pick(40, 100000)
		loadTime = pick(12*time.Second, 60*time.Second)
		deadline = pick(3*time.Minute, 10*time.Minute)
	)
	const leases = 3 * time.Second
	e := newEnv(t, pluginFleet)
	storage := filepath.Join(t.TempDir(), "storage")
	require.NoError(t, os.MkdirAll(storage, 0o750))
	e.extra = append(e.extra, "LETHE_STORE="+store, "LETHE_STORAGE=file://"+storage,
		"LETHE_PLUGIN_ENV="+pluginFleet+":LETHE_RECORD_FILE="+e.record+"\n"+pluginFleet+":LETHE_RECORD_SLEEP=2ms\n"+pluginFleet+":"+noPluginsEnv)
	e.ok("migrate")
	e.ok("plugin", "lock")
	f := newFaultRun(t, e)

	ctx, cancel := context.WithTimeout(catalog.WithActor(context.Background(), "fault-test"), deadline)
	defer cancel()
	st, err := drivers.Open(ctx, store, &catalog.Config{})
	require.NoError(t, err)
	defer st.Close()

	deps := cascadeOf(ctx, t, e, st, items, snaps)
	for _, n := range []string{"r1", "r2", "r3"} {
		f.startReplica(n, "--workers", "2", "--lease-ttl", leases.String(), "--leader-lease-ttl", leases.String(), "--poll-interval", "1s")
	}
	for _, r := range f.replicas {
		waitReady(ctx, t, r)
	}
	waitLoad := f.load(strings.ReplaceAll(name, "-", ""), backups, items, time.Second, loadTime)
	for len(f.registered()) == 0 || !purgedAny(ctx, st, f.registered()) {
		f.requireAllRunning()
		require.True(t, sleepCtx(ctx, 100*time.Millisecond), "no purge before the fault")
	}
	e.ok("backup", "delete", "cascade", "--yes", "--async")
	waitAnyHolding(ctx, t, st, 3)
	require.True(t, strikeLater(ctx, t))

	began := time.Now()
	ended := inject(ctx, f, st)
	f.requireAllRunning()
	last := ended[len(ended)-1]

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
		Plugins:    []string{"test.lethe.io/a-first", "test.lethe.io/b-second"},
		Dependents: map[string][]string{"cascade": deps},
		StorageDir: storage, Record: e.record,
	})
	for i, at := range ended {
		first, ok := recovery(rep.PurgedAt, at)
		require.True(t, ok, "no purge after fault %d", i+1)
		t.Logf("FIGURE %s %d: first purge %s after the fault ended", name, i+1, first.Round(time.Millisecond))
	}
	t.Logf("FIGURE %s: %d faults, leases %s; purged before the first %d; %.2f purges/s after the last; all %d purged %s after it",
		name, len(ended), leases, countPurgedBefore(rep.PurgedAt, began), rate(rep.PurgedAt, last, done), len(rep.PurgedAt), done.Sub(last).Round(time.Second))
}
