package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// TestPausedLeaderWritesNothingOnceAnotherTermBegan: two `lethe server`
// replicas on one PostgreSQL database. The leader is frozen with SIGSTOP
// while the TTLs of some backups are about to expire, past its lease; the
// other replica takes over and requests those deletions, and the operator
// undeletes them (which clears their TTLs). The first is then resumed with
// SIGCONT, its TTL timers for them due at once, and more backups expire.
// The undeleted backups stay Active; the audit log shows every leader-only
// write made by the new term, none by the old term after the new one
// began, one TTL request per backup.
func TestPausedLeaderWritesNothingOnceAnotherTermBegan(t *testing.T) {
	admin := os.Getenv("LETHE_TEST_POSTGRES_URL")
	if admin == "" {
		t.Skip("set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	}
	const leaderTTL = 2 * time.Second
	store := createDatabase(t, admin)
	e := newEnv(t, pluginNoop)
	shared := filepath.Join(t.TempDir(), "storage")
	require.NoError(t, os.MkdirAll(shared, 0o750))
	e.extra = append(e.extra, "LETHE_STORE="+store, "LETHE_STORAGE=file://"+shared)
	e.ok("migrate")
	e.ok("plugin", "lock") // lethe server runs pinned plugins only

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := drivers.Open(ctx, store, &catalog.Config{})
	require.NoError(t, err)
	defer st.Close()
	pg, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer pg.Close(context.Background())
	dbName := store[strings.LastIndex(store, "/")+1:]
	if i := strings.IndexByte(dbName, '?'); i >= 0 {
		dbName = dbName[:i]
	}

	start := func(name string) *replica {
		r := &replica{name: name, addr: freeAddr(t)}
		r.p = e.startLong(4*time.Minute, "server", "--workers", "1", "--metrics-addr", r.addr, "--log-format", "json",
			"--leader-lease-ttl", leaderTTL.String(), "--poll-interval", "1s")
		return r
	}
	a := start("a")
	waitReady(ctx, t, a)
	first := waitLeader(ctx, t, st, "")
	require.Same(t, a, replicaOf(t, []*replica{a}, first.Holder), "the first replica leads")
	b := start("b")
	waitReady(ctx, t, b)

	// Backups whose TTLs expire while the leader is frozen; a grace window
	// keeps them Scheduled, so each TTL request is one audit entry.
	const ttl = 8 * time.Second
	var paused []string
	for i := range 4 {
		n := fmt.Sprintf("paused-%d", i)
		e.create(n, 3, "--ttl", ttl.String(), "--deletion-delay", "1h")
		paused = append(paused, n)
	}
	// Freeze the leader, but not in the middle of a transaction or a
	// statement (a lock it holds would only delay the takeover until it
	// resumes): no session of the database may be busy, twice in a row.
	busy := func() bool {
		var n int
		require.NoError(t, pg.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state <> 'idle'`,
			dbName).Scan(&n))
		return n > 0
	}
	for try := 0; ; try++ {
		require.NoError(t, a.p.cmd.Process.Signal(syscall.SIGSTOP))
		if !busy() && sleepCtx(ctx, 50*time.Millisecond) && !busy() {
			break
		}
		require.Less(t, try, 100, "the database is always busy")
		require.NoError(t, a.p.cmd.Process.Signal(syscall.SIGCONT))
		time.Sleep(20 * time.Millisecond)
	}
	stoppedAt := time.Now()
	t.Logf("SIGSTOPped the leader %s (term %d)", first.Holder, first.Term)
	requireNoTTLRequest(t, st, paused) // else the machine is too slow for this test

	second := waitLeader(ctx, t, st, first.Holder)
	require.Equal(t, first.Term+1, second.Term)
	waitScheduled(ctx, t, st, paused)
	// The operator keeps them: undelete clears their expired TTLs. The
	// frozen leader's TTL index still holds them, due: resumed and
	// unfenced, it would schedule them again.
	for _, n := range paused {
		e.ok("backup", "undelete", n)
	}
	// Resume the old leader once its TTL timers are due.
	if d := time.Until(stoppedAt.Add(leaderTTL + time.Second)); d > 0 {
		time.Sleep(d)
	}
	require.NoError(t, a.p.cmd.Process.Signal(syscall.SIGCONT))
	t.Logf("SIGCONTed it after %s; leader now %s (term %d)", time.Since(stoppedAt).Round(time.Millisecond), second.Holder, second.Term)

	// More expiries after it resumed.
	var after []string
	for i := range 2 {
		n := fmt.Sprintf("after-%d", i)
		e.create(n, 3, "--ttl", "1s", "--deletion-delay", "1h")
		after = append(after, n)
	}
	waitScheduled(ctx, t, st, after)
	time.Sleep(leaderTTL) // the old leader has had every chance to write

	for _, r := range []*replica{a, b} {
		require.NoError(t, r.p.cmd.Process.Signal(syscall.SIGTERM))
	}
	ra, rb := a.p.wait(t), b.p.wait(t)
	require.Equal(t, 0, ra.code, "%s", ra)
	require.Equal(t, 0, rb.code, "%s", rb)

	// The terms: the first holder's, then the second's by takeover; the
	// old leader never led again (its graceful stop resigned nothing).
	leaders, err := st.ListAudit(ctx, catalog.AuditFilter{Kind: catalog.AuditKindLeader})
	require.NoError(t, err)
	var elected int64
	for _, l := range leaders {
		var d struct {
			Holder   string `json:"holder"`
			Term     int64  `json:"term"`
			TookOver bool   `json:"tookOver"`
		}
		require.NoError(t, json.Unmarshal(l.Details, &d))
		if l.Action != catalog.AuditLeaderElected {
			continue
		}
		require.LessOrEqual(t, d.Term, second.Term, "no later term: %+v", leaders)
		if d.Term == second.Term {
			require.True(t, d.TookOver)
			elected = l.ID
		}
	}
	require.NotZero(t, elected)

	// Every leader-only write after the takeover is the new term's; each
	// backup got one TTL request, from the new term.
	oldTerm, newTerm := fmt.Sprintf("(leader term %d)", first.Term), fmt.Sprintf("(leader term %d)", second.Term)
	all, err := st.ListAudit(ctx, catalog.AuditFilter{})
	require.NoError(t, err)
	requests := map[string]int{}
	for _, x := range all {
		if x.ID > elected {
			require.NotContains(t, x.Actor, oldTerm, "a write of the old term after the new one began: %+v", x)
		}
		if x.Reason == "TTL expired" {
			require.Contains(t, x.Actor, newTerm, "%+v", x)
			requests[x.Name]++
		}
	}
	for _, n := range append(paused, after...) {
		require.Equal(t, 1, requests[n], "TTL requests of %s: %v", n, requests)
	}
	for _, n := range paused {
		r, err := st.Get(ctx, catalog.Key{Kind: "Backup", Name: n})
		require.NoError(t, err)
		require.Equal(t, catalog.PhaseActive, r.Phase, "%s was undeleted and must stay so", n)
	}

	// What the old leader did once resumed.
	var stepDown string
	tried, refused := 0, 0
	for _, line := range strings.Split(ra.stderr, "\n") {
		var l struct {
			Message string `json:"@message"`
			Reason  string `json:"reason"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch {
		case l.Message == "no longer leading":
			stepDown = l.Reason
		case strings.HasPrefix(l.Message, "TTL expired"):
			tried++
		}
		if strings.Contains(line, catalog.ErrStaleTerm.Error()) {
			refused++
		}
	}
	// Stepping down is the elector's part (TestRenewalNamingAnotherHolder-
	// StopsTheLeaderAtOnce pins it); what this test pins is that nothing
	// of the old term was written, whether it stepped down or not.
	t.Logf("the old leader stepped down: %q; it had begun %d TTL request(s) in all, and the catalog refused %d stale write(s)",
		stepDown, tried, refused)
}

// requireNoTTLRequest fails if any of names already had its TTL request.
func requireNoTTLRequest(t *testing.T, st catalog.Store, names []string) {
	t.Helper()
	for _, n := range names {
		r, err := st.Get(context.Background(), catalog.Key{Kind: "Backup", Name: n})
		require.NoError(t, err)
		require.Equal(t, catalog.PhaseActive, r.Phase, "%s expired before the leader was paused: the machine is too slow for this test", n)
	}
}

// waitScheduled waits until every backup of names is Scheduled.
func waitScheduled(ctx context.Context, t *testing.T, st catalog.Store, names []string) {
	t.Helper()
	for _, n := range names {
		for {
			r, err := st.Get(ctx, catalog.Key{Kind: "Backup", Name: n})
			require.NoError(t, err)
			if r.Phase == catalog.PhaseScheduled {
				break
			}
			if !sleepCtx(ctx, 20*time.Millisecond) {
				t.Fatalf("%s is still %s", n, r.Phase)
			}
		}
	}
}
