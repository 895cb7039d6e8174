package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the checker
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/faults"
)

// faultsEnv selects the fault suite's length (docs/faults.md): unset, the
// short version that `make test` runs; "full", the long one of `make
// faults`.
const faultsEnv = "LETHE_FAULTS"

func faultsFull() bool { return os.Getenv(faultsEnv) == "full" }

// faultsParallel runs a short fault test beside the others; the full run
// keeps each alone, so that its figures are its own.
func faultsParallel(t *testing.T) {
	if !faultsFull() {
		t.Parallel()
	}
}

// faultsNeed skips a test whose service is missing (why says which), or
// fails it in the full run and in CI (LETHE_FAULTS_REQUIRE=1), which must
// not pass by skipping.
func faultsNeed(t *testing.T, missing bool, why string) {
	t.Helper()
	if !missing {
		return
	}
	if faultsFull() {
		t.Fatalf("%s=full: %s", faultsEnv, why)
	}
	if os.Getenv("LETHE_FAULTS_REQUIRE") == "1" {
		t.Fatalf("LETHE_FAULTS_REQUIRE=1: %s", why)
	}
	t.Skip(why)
}

// pick returns short, or full under LETHE_FAULTS=full.
func pick[T any](short, full T) T {
	if faultsFull() {
		return full
	}
	return short
}

// faultRand is one fault test's random source, seeded from
// LETHE_FAULTS_SEED or else the clock. The seed is logged: setting it
// replays the run's choices (where each fault strikes, and the mixed
// run's order and gaps).
func faultRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LETHE_FAULTS_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "LETHE_FAULTS_SEED")
	}
	t.Logf("seed %d (LETHE_FAULTS_SEED=%d replays this run's choices)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed))
}

// strikeLater waits a random time of up to most (1 s in the short
// run, 8 s in the full one) after the point the test waited for (a purge
// done, a deletion held): each run strikes at another point of the load.
// It reports false if ctx ended first.
func strikeLater(ctx context.Context, t *testing.T) bool {
	t.Helper()
	most := pick(time.Second, 8*time.Second)
	d := time.Duration(faultRand(t).Int64N(int64(most)))
	t.Logf("the fault strikes %s after the point the test waited for", d.Round(time.Millisecond))
	return sleepCtx(ctx, d)
}

// faultRun is one fault test: replicas of `lethe server` on one catalog,
// the backups that a load registers while they run, and the checks.
type faultRun struct {
	t        *testing.T
	e        *env
	served   []string // environment of the replicas only (e.g. LETHE_STORE through a proxy)
	replicas []*replica

	mu      sync.Mutex
	names   []string       // backups registered, all due for purging
	items   map[string]int // items of each
	created []time.Time
}

func newFaultRun(t *testing.T, e *env) *faultRun {
	return &faultRun{t: t, e: e, items: map[string]int{}}
}

// startReplica starts one `lethe server`, with the run's replica
// environment on top of the env's.
func (f *faultRun) startReplica(name string, args ...string) *replica {
	t := f.t
	r := &replica{name: name, addr: freeAddr(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	// The default storage sync runs, racing the load's `backup create`
	// (a create's upload is the create's: docs/faults.md).
	args = append([]string{"server", "--metrics-addr", r.addr, "--log-format", "json"}, args...)
	cmd, out, errb := f.e.command(ctx, args...)
	cmd.Env = append(cmd.Env, f.served...)
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, out: out, errb: errb, done: make(chan struct{}), cancel: cancel}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		cancel()
		if d := os.Getenv("LETHE_FAULTS_LOGDIR"); d != "" {
			_ = os.WriteFile(filepath.Join(d, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log"), errb.Bytes(), 0o600)
		}
		if t.Failed() {
			logs := errb.String()
			if len(logs) > 6000 {
				logs = "…" + logs[len(logs)-6000:]
			}
			t.Logf("replica %s's log (its end):\n%s", name, logs)
		}
	})
	r.p = p
	f.replicas = append(f.replicas, r)
	return r
}

// load registers n backups of items items each, spread over d, with a
// TTL of ttl; every third has a deletion delay of 1 s. It runs in the
// background; wait for it with the returned function.
func (f *faultRun) load(prefix string, n, items int, ttl, d time.Duration) func() {
	var wg sync.WaitGroup
	wg.Go(func() {
		began := time.Now()
		for i := range n {
			if at := began.Add(d * time.Duration(i) / time.Duration(n)); time.Until(at) > 0 {
				time.Sleep(time.Until(at))
			}
			name := fmt.Sprintf("%s-%03d", prefix, i)
			args := []string{"backup", "create", name, "--from", f.e.writeTarball(name, items), "--ttl", ttl.String()}
			if i%3 == 0 {
				args = append(args, "--deletion-delay", "1s")
			}
			// A create that fails (its storage failing on purpose) is
			// retried, as an operator would, for up to a minute.
			for try := 0; ; try++ {
				r := f.e.run(args...)
				if r.code == 0 {
					break
				}
				if try == 0 {
					f.t.Logf("backup create %s failed; retrying: %s", name, strings.TrimSpace(r.stderr))
				}
				if try == 120 {
					f.t.Errorf("%s", r)
					return
				}
				time.Sleep(500 * time.Millisecond)
			}
			f.mu.Lock()
			f.names = append(f.names, name)
			f.items[name] = items
			f.created = append(f.created, time.Now())
			f.mu.Unlock()
		}
	})
	return wg.Wait
}

func (f *faultRun) registered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.names...)
}

// requireAllRunning fails if a replica exited: no fault may take one down.
func (f *faultRun) requireAllRunning() {
	f.t.Helper()
	for _, r := range f.replicas {
		if r.p.exited() {
			f.t.Fatalf("replica %s exited during the fault run: %s", r.name, r.p.wait(f.t))
		}
	}
}

// stop SIGTERMs every replica; each must exit 0. It returns how many
// log lines of each message they wrote, and logs their errors.
func (f *faultRun) stop() map[string]int {
	f.t.Helper()
	f.requireAllRunning()
	for _, r := range f.replicas {
		if err := r.p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			require.NoError(f.t, err)
		}
	}
	messages := map[string]int{}
	for _, r := range f.replicas {
		res := r.p.wait(f.t)
		require.Equal(f.t, 0, res.code, "%s", res)
		errs := 0
		for _, line := range strings.Split(res.stderr, "\n") {
			if !strings.HasPrefix(line, "{") {
				continue
			}
			msg := jsonField(line, "@message")
			messages[msg]++
			if jsonField(line, "@level") == "error" && errs < 5 {
				errs++
				f.t.Logf("%s logged an error: %s", r.name, line)
			}
		}
	}
	return messages
}

// jsonField pulls a string field out of one JSON log line, or "".
func jsonField(line, field string) string {
	_, rest, ok := strings.Cut(line, `"`+field+`":"`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// waitPurged waits until every name has a tombstone, watching that no
// replica exits meanwhile.
func (f *faultRun) waitPurged(ctx context.Context, st catalog.Store, names []string) {
	f.t.Helper()
	left := map[string]bool{}
	for _, n := range names {
		left[n] = true
	}
	for len(left) > 0 {
		f.requireAllRunning()
		for n := range left {
			if _, err := st.GetTombstone(ctx, catalog.Key{Kind: "Backup", Name: n}); err == nil {
				delete(left, n)
			}
		}
		if len(left) > 0 && !sleepCtx(ctx, 100*time.Millisecond) {
			var l []string
			for n := range left {
				l = append(l, n)
			}
			sort.Strings(l)
			f.t.Fatalf("not purged in time: %v", l)
		}
	}
}

// check runs the independent checker and fails on any violation.
func (f *faultRun) check(ctx context.Context, db *sql.DB, want faults.Expect) *faults.Report {
	f.t.Helper()
	rep, err := faults.Check(ctx, db, want)
	require.NoError(f.t, err)
	for _, v := range rep.Violations {
		f.t.Errorf("checker: %s", v)
	}
	return rep
}

// recovery reports, from the tombstones' times, the first purge after
// end and the purge rate in [from, to) (purges per second).
func recovery(purgedAt map[string]int64, end time.Time) (time.Duration, bool) {
	first := int64(-1)
	for _, at := range purgedAt {
		if at >= end.UnixNano() && (first < 0 || at < first) {
			first = at
		}
	}
	if first < 0 {
		return 0, false
	}
	return time.Duration(first - end.UnixNano()), true
}

func rate(purgedAt map[string]int64, from, to time.Time) float64 {
	n := 0
	for _, at := range purgedAt {
		if at >= from.UnixNano() && at < to.UnixNano() {
			n++
		}
	}
	if d := to.Sub(from).Seconds(); d > 0 {
		return float64(n) / d
	}
	return 0
}

func countPurgedBefore(purgedAt map[string]int64, t time.Time) int {
	n := 0
	for _, at := range purgedAt {
		if at < t.UnixNano() {
			n++
		}
	}
	return n
}

// waitAnyHolding waits until some replica holds a live deletion lease,
// or until n backups are purged with none seen held.
func waitAnyHolding(ctx context.Context, t *testing.T, st catalog.Store, n int) {
	t.Helper()
	for {
		items, err := st.ListWork(ctx, deletion.Queue)
		require.NoError(t, err)
		for _, w := range items {
			if w.Holder != "" && w.LeaseExpiresAt.After(time.Now()) {
				return
			}
		}
		if countTombstones(ctx, t, st) >= n {
			t.Logf("no deletion held before %d were purged", n)
			return
		}
		if !sleepCtx(ctx, 5*time.Millisecond) {
			t.Fatal("no deletion was ever held")
		}
	}
}

func countTombstones(ctx context.Context, t *testing.T, st catalog.Store) int {
	audit, err := st.ListAudit(ctx, catalog.AuditFilter{Kind: "Backup"})
	require.NoError(t, err)
	n := 0
	for _, a := range audit {
		if strings.Contains(a.Action, "purge") {
			n++
		}
	}
	return n
}
