package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/catalog"
)

// deletionQueue is the catalog work queue of backup deletions
// (deletion.Queue).
const deletionQueue = "deletion"

// leaseTTL is the CLI's deletion lease, deletion.LeaseTTLDefault: the CLI
// offers no way to change it.
const leaseTTL = 30 * time.Second

// TestCrashResume is DESIGN §7.2 and issue 5 point 4: the deleting lethe
// process is SIGKILLed at random points, at least five times, and rerun;
// then a last run finishes. Every item must have reached every matching
// plugin at least once, none is skipped, and the backup is purged exactly
// once, at the end.
func TestCrashResume(t *testing.T) {
	t.Parallel()
	const (
		name     = "crash"
		n        = 50000
		minKills = 5
	)
	e := newEnv(t, pluginRecorder)
	e.create(name, n)
	uid := e.get(name).UID

	// Bytes one full run writes to the record file, to pick kill points
	// that fall inside the run.
	var fullRun int64
	for i := range n {
		s := archivetest.SpecN(i, 200)
		line := int64(len(s.Key()) + 2)
		fullRun += 2*line + int64(len(recFirst)+len(recSecond))
		if s.Resource == "pods" {
			fullRun += line + int64(len(recPods))
		}
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (kill points are random)", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	var (
		kills         int
		deadLeases    int
		lastWatermark int64
		killed        []string // pids of the killed lethe processes
	)
	for attempt := 0; kills < minKills; attempt++ {
		require.Less(t, attempt, 3*minKills, "could not kill lethe mid-deletion %d times", minKills)
		remaining := fullRun * (n - lastWatermark) / n
		// Kill points: during start-up and validation (a random delay), or
		// while plugins work (once the record grew past a random size; the
		// third kill comes late, so that a checkpoint has surely been
		// written and the next run must resume from it).
		var delay time.Duration = cmdTimeout
		var growth int64
		switch {
		case kills == 2:
			growth = remaining * (75 + rng.Int64N(10)) / 100
		case rng.IntN(4) == 0:
			delay = time.Duration(rng.Int64N(int64(800 * time.Millisecond)))
			growth = remaining / 2
		default:
			growth = 1 + rng.Int64N(max(remaining/2, 2))
		}
		before := fileSize(e.record)
		startWatermark := lastWatermark

		p := e.start("backup", "delete", name, "--yes")
		started := time.Now()
		for i := 0; i < 10000 && !p.exited(); i++ {
			if time.Since(started) >= delay || fileSize(e.record)-before >= growth {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		r := p.wait(t)
		if !p.killedBySIGKILL() {
			// The kill points lie before the end of the work, so lethe
			// cannot have finished: it failed.
			t.Fatalf("lethe ended on its own before being killed (kill %d)\n%s", kills+1, r)
		}
		kills++
		killed = append(killed, strconv.Itoa(p.cmd.Process.Pid))
		// The plugin processes (in their own process groups, so the kill
		// does not reach them) must notice and exit on their own.
		left := waitNoPluginProcs(e.pluginDir(), 10*time.Second)
		killPluginProcs(t, e.pluginDir())
		require.Empty(t, left, "plugin processes %v outlived the SIGKILLed lethe by 10s", left)
		after := fileSize(e.record)
		t.Logf("kill %d: after %v, record +%d bytes (trigger: %v or +%d bytes)", kills, time.Since(started).Round(time.Millisecond), after-before, delay, growth)

		// The run resent nothing below the watermark it started from.
		for _, ord := range recordOrdinals(t, e.record, before, after) {
			require.GreaterOrEqual(t, ord, startWatermark, "run %d resent an item settled before it started", kills)
		}

		// The progress persisted so far never goes back.
		b := e.get(name)
		if b.Phase == "Deleting" {
			// No progress row until the first checkpoint: watermark 0.
			var wm int64
			if b.Progress != nil {
				wm = b.Progress.Watermark
				require.EqualValues(t, n, b.Progress.TotalItems)
			}
			require.GreaterOrEqual(t, wm, lastWatermark, "the watermark went back")
			require.LessOrEqual(t, wm, int64(n))
			lastWatermark = wm
			t.Logf("  watermark %d/%d", lastWatermark, n)
		} else {
			require.Equal(t, "Active", b.Phase, "killed before the deletion started")
			require.Zero(t, lastWatermark)
			require.Equal(t, before, after, "plugins ran for a backup that is not Deleting")
		}
		if kills == 3 {
			require.Positive(t, lastWatermark, "a run killed late must have checkpointed its progress")
		}

		// The killed process may have left the deletion's lease live. The
		// next run takes a dead local holder's lease over at once
		// (internal/deletion/holder.go) instead of waiting for its expiry.
		st := e.openCatalog()
		w, err := st.GetWork(context.Background(), deletionQueue, uid)
		require.NoError(t, st.Close())
		if errors.Is(err, catalog.ErrNotFound) {
			continue
		}
		require.NoError(t, err)
		if w.Holder != "" && w.LeaseExpiresAt.After(time.Now()) {
			// Held by the run just killed, or by an earlier one if this
			// run died before it claimed the lease.
			_, pid, _ := strings.Cut(w.Holder, " pid ")
			pid, _, _ = strings.Cut(pid, " ns ")
			require.Contains(t, killed, pid, "the lease is held by %q, not by a killed lethe %v", w.Holder, killed)
			require.LessOrEqual(t, time.Until(w.LeaseExpiresAt), leaseTTL+time.Second)
			deadLeases++
		}
	}
	// A kill while plugins worked left a live lease, and the next run did
	// not wait for it (each run above would have failed otherwise).
	require.Positive(t, deadLeases, "no kill left a live lease: the takeover was not exercised")

	// The last run resends only what is not settled.
	before, finalWatermark := fileSize(e.record), lastWatermark
	r := e.ok("backup", "delete", name, "--yes")
	require.Contains(t, r.stdout, fmt.Sprintf("backup %s deleted: %d items", name, n), "%s", r)
	for _, ord := range recordOrdinals(t, e.record, before, fileSize(e.record)) {
		require.GreaterOrEqual(t, ord, finalWatermark, "the last run resent an item settled before it started")
	}

	// Every item reached every matching plugin at least once; the pods
	// plugin got pods only.
	rec := e.readRecord()
	redelivered := 0
	for i := range n {
		s := archivetest.SpecN(i, 200)
		k := s.Key()
		for _, pl := range []string{recFirst, recSecond} {
			require.GreaterOrEqual(t, rec[pl][k], 1, "%s never reached %s", k, pl)
			redelivered += rec[pl][k] - 1
		}
		if s.Resource == "pods" {
			require.GreaterOrEqual(t, rec[recPods][k], 1, "%s never reached %s", k, recPods)
			redelivered += rec[recPods][k] - 1
		} else {
			require.Zero(t, rec[recPods][k], "%s is not a pod but reached %s", k, recPods)
		}
	}
	require.Len(t, rec[recFirst], n, "items the tarball does not hold were delivered")
	require.Len(t, rec[recSecond], n)
	require.Len(t, rec, 3)
	t.Logf("%d kills; %d deliveries were repeats (at least once is allowed)", kills, redelivered)

	// Purged exactly once, at the end: one purge in the audit, a tombstone,
	// and a later delete is refused without running any plugin.
	e.requirePurged(name)
	size := fileSize(e.record)
	again := e.run("backup", "delete", name, "--yes")
	require.Equal(t, 4, again.code, "%s", again)
	requireOneErrorLine(t, again, `backup "`+name+`" was purged at `)
	require.Equal(t, size, fileSize(e.record), "a purged backup's plugins ran again")
	e.requirePurged(name)
}

// TestPluginsDieWithLethe: after lethe is SIGKILLed, its plugin processes
// (each in its own process group, so the kill does not reach them) must
// exit on their own soon, even while busy with an item. Issue 2 point 4: "Every plugin process is gone
// when lethe exits"; DESIGN §3 "No zombies".
func TestPluginsDieWithLethe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pluginGate)
	e.create("orphans", 10)
	hold := filepath.Join(e.gate, "hold")
	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	p := e.start("backup", "delete", "orphans", "--yes")
	waitForFile(t, p, filepath.Join(e.gate, "started"))
	require.NotEmpty(t, pluginProcs(e.pluginDir()), "the plugin is running")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait(t)
	require.True(t, p.killedBySIGKILL())
	left := waitNoPluginProcs(e.pluginDir(), 10*time.Second)
	require.Empty(t, left, "plugin processes %v outlived the SIGKILLed lethe by 10s", left)
}

// waitForFile waits, boundedly, for path to appear while p runs.
func waitForFile(t *testing.T, p *proc, path string) {
	t.Helper()
	for i := 0; i < 3000; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if p.exited() {
			t.Fatalf("lethe exited before %s appeared\n%s", path, p.wait(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not appear in 30s", path)
}

var leaseMsg = regexp.MustCompile(`^Error: backup (\S+) is already being deleted by (\S+) pid (\d+)(?: ns \d+)? \(lease until (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\)$`)

// TestNoDoubleRun is issue 5 point 5: two deletions of one backup at once;
// one does the work, the other names the lease holder and the time.
func TestNoDoubleRun(t *testing.T) {
	t.Parallel()
	t.Run("second while the first runs", func(t *testing.T) {
		t.Parallel()
		const n = 50
		e := newEnv(t, pluginGate)
		e.create("busy", n)
		hold := filepath.Join(e.gate, "hold")
		require.NoError(t, os.WriteFile(hold, nil, 0o600))
		first := e.start("backup", "delete", "busy", "--yes")
		waitForFile(t, first, filepath.Join(e.gate, "started"))

		second := e.run("backup", "delete", "busy", "--yes")
		require.Equal(t, 1, second.code, "%s", second)
		requireOneErrorLine(t, second, "")
		m := leaseMsg.FindStringSubmatch(strings.TrimSuffix(second.stderr, "\n"))
		require.NotNil(t, m, "want the holder and the time, got %q", second.stderr)
		require.Equal(t, "busy", m[1])
		require.Equal(t, strconv.Itoa(first.cmd.Process.Pid), m[3], "the error names the wrong process")
		until, err := time.Parse(time.RFC3339, m[4])
		require.NoError(t, err)
		require.True(t, until.After(time.Now().Add(-2*time.Second)), "the lease named is already over: %s", until)
		require.False(t, first.exited(), "the first deletion must still be running")

		require.NoError(t, os.Remove(hold))
		r := first.wait(t)
		require.Equal(t, 0, r.code, "%s", r)
		require.Contains(t, r.stdout, fmt.Sprintf("backup busy deleted: %d items", n))
		lines := readLines(t, filepath.Join(e.gate, "record"))
		require.Len(t, lines, n, "each item goes through the plugin once: only one deletion ran")
		require.Len(t, uniq(lines), n)
		e.requirePurged("busy")
	})
	t.Run("started together", func(t *testing.T) {
		t.Parallel()
		const n, procs = 50, 3
		e := newEnv(t, pluginGate)
		e.create("race", n)
		hold := filepath.Join(e.gate, "hold")
		require.NoError(t, os.WriteFile(hold, nil, 0o600))
		var ps []*proc
		for range procs {
			ps = append(ps, e.start("backup", "delete", "race", "--yes"))
		}
		// All but one must give up while the winner is held at the gate.
		losers := map[*proc]result{}
		for i := 0; i < 3000 && len(losers) < procs-1; i++ {
			for _, p := range ps {
				if _, ok := losers[p]; !ok && p.exited() {
					losers[p] = p.wait(t)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.Len(t, losers, procs-1, "exactly one deletion may run")
		var winner *proc
		for _, p := range ps {
			if _, ok := losers[p]; !ok {
				winner = p
			}
		}
		for _, r := range losers {
			require.Equal(t, 1, r.code, "%s", r)
			m := leaseMsg.FindStringSubmatch(strings.TrimSuffix(r.stderr, "\n"))
			require.NotNil(t, m, "want the holder and the time\n%s", r)
			require.Equal(t, strconv.Itoa(winner.cmd.Process.Pid), m[3])
		}
		require.NoError(t, os.Remove(hold))
		r := winner.wait(t)
		require.Equal(t, 0, r.code, "%s", r)
		require.Len(t, readLines(t, filepath.Join(e.gate, "record")), n)
		e.requirePurged("race")
	})
}

// recordOrdinals returns the item ordinals of the recorder lines written
// between two sizes of its file: SpecN names end in "-<ordinal>".
func recordOrdinals(t *testing.T, path string, from, to int64) []int64 {
	t.Helper()
	if to <= from {
		return nil
	}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, to-from)
	_, err = f.ReadAt(buf, from)
	require.NoError(t, err)
	var out []int64
	for _, line := range strings.Split(strings.TrimSuffix(string(buf), "\n"), "\n") {
		i := strings.LastIndexByte(line, '-')
		require.Positive(t, i, "bad record line %q", line)
		ord, err := strconv.ParseInt(line[i+1:], 10, 64)
		require.NoError(t, err, "bad record line %q", line)
		out = append(out, ord)
	}
	return out
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func uniq(lines []string) map[string]bool {
	m := map[string]bool{}
	for _, l := range lines {
		m[l] = true
	}
	return m
}
