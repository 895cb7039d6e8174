package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/faults"
)

// TestFaultPluginCrashStormLosesNoItemAndOtherPluginsGoOn is issue 28's
// "plugin crash storm": one `lethe server` on SQLite runs two plugin
// binaries; one (crashrec, a copy of fleetrec serving
// test.lethe.io/c-crashy) exits on the first delivery of one item in five. The
// same load runs twice, without and then with the storm. With it, no
// deletion is lost or repeated (the independent checker), every item
// reached the crashing plugin too, the replica never exits or gives the
// plugin up (the storm's process answers between crashes, so its
// consecutive failures never pass the bound), and its restarts are
// counted. The test logs both runs' durations: how much the storm slows
// the deletions that the other binary's plugins take part in.
func TestFaultPluginCrashStormLosesNoItemAndOtherPluginsGoOn(t *testing.T) {
	faultsParallel(t)
	var (
		backups  = pick(6, 40)
		items    = pick(40, 100)
		loadTime = pick(6*time.Second, 30*time.Second)
		deadline = pick(2*time.Minute, 10*time.Minute)
	)
	const crashy = "test.lethe.io/c-crashy"
	run := func(t *testing.T, storm bool) time.Duration {
		e := newEnv(t, pluginFleet)
		copyFile(t, filepath.Join(bin, pluginFleet), filepath.Join(e.pluginDir(), "crashrec"), 0o750)
		every := "0"
		if storm {
			every = "5"
		}
		e.extra = append(e.extra, "LETHE_PLUGIN_ENV="+pluginFleet+":LETHE_RECORD_FILE="+e.record+
			"\ncrashrec:LETHE_RECORD_FILE="+e.record+"\ncrashrec:LETHE_RECORD_PLUGINS="+crashy+"\ncrashrec:LETHE_RECORD_CRASH_EVERY="+every+
			"\ncrashrec:LETHE_RECORD_CRASH_DIR="+t.TempDir())
		e.ok("plugin", "lock")
		f := newFaultRun(t, e)
		ctx, cancel := context.WithTimeout(catalog.WithActor(context.Background(), "fault-test"), deadline)
		defer cancel()
		// A short retry backoff: an item in flight beside the one that
		// crashed, redelivered alone, may be the next to crash it, and is
		// then failed and retried (docs/retry.md).
		r := f.startReplica("r1", "--workers", "2", "--poll-interval", "1s", "--retry-backoff", "1s")
		waitReady(ctx, t, r)
		began := time.Now()
		pace := followRecord(ctx, e.record)
		f.load("storm", backups, items, time.Second, loadTime)()
		names := f.registered()
		f.waitPurged(ctx, e.catalog(), names)
		took := time.Since(began)
		// Each plugin's own pace: the storm's binary's plugin against the
		// other binary's, which must keep theirs (a figure, not an
		// assertion: wall-clock time is for benchmarks).
		time.Sleep(200 * time.Millisecond) // the follower's last poll
		paces := pace.summary(began)
		for _, pl := range []string{"test.lethe.io/a-first", "test.lethe.io/b-second", crashy} {
			t.Logf("FIGURE plugin-pace storm=%v %s: %s", storm, pl, paces[pl])
		}
		restarts := scrapeMetric(t, r.addr, `lethe_plugin_restarts_total{plugin="`+crashy+`"}`)
		messages := f.stop()
		t.Logf("log messages: %v", messages)

		db, err := sql.Open("sqlite", "file:"+filepath.Join(e.home, "lethe.db")+"?mode=ro")
		require.NoError(t, err)
		defer db.Close()
		rep := f.check(ctx, db, faults.Expect{
			Backups: names, Items: f.items,
			Plugins:    []string{"test.lethe.io/a-first", "test.lethe.io/b-second", crashy},
			StorageDir: e.storageDir(), Record: e.record,
		})
		if storm {
			require.Positive(t, rep.Crashes, "the plugin crashed")
			// Every crash is a restart; a metric scraped before the last
			// crash's restart may miss it.
			require.GreaterOrEqual(t, restarts, float64(rep.Crashes-1), "restarts counted")
			require.Zero(t, messages["plugin failed to start"], "a restart failed")
			t.Logf("FIGURE plugin-storm: %d backups × %d items, %d crashes of %s, %v restarts counted; all purged %s after the first was registered",
				backups, items, rep.Crashes, crashy, restarts, took.Round(100*time.Millisecond))
		} else {
			require.Zero(t, rep.Crashes)
			t.Logf("FIGURE plugin-baseline: %d backups × %d items, no crash; all purged %s after the first was registered",
				backups, items, took.Round(100*time.Millisecond))
		}
		return took
	}
	var base time.Duration
	t.Run("baseline", func(t *testing.T) { base = run(t, false) })
	t.Run("storm", func(t *testing.T) {
		storm := run(t, true)
		t.Logf("the storm took %.2f× the baseline's time (the load alone takes %s of either)", storm.Seconds()/base.Seconds(), loadTime)
	})
}

// recordPace follows a fleetrec record file while a run goes on and
// notes, for each plugin, when it first finished an item (an E line of a
// backup and item not seen before for that plugin) and when it last
// did: each plugin's own pace, which the whole run's time hides.
type recordPace struct {
	mu    sync.Mutex
	seen  map[string]bool
	first map[string]time.Time
	last  map[string]time.Time
	n     map[string]int
}

// followRecord polls path every 100 ms until ctx ends.
func followRecord(ctx context.Context, path string) *recordPace {
	p := &recordPace{seen: map[string]bool{}, first: map[string]time.Time{}, last: map[string]time.Time{}, n: map[string]int{}}
	go func() {
		var off int64
		var rest []byte
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			f, err := os.Open(path)
			if err != nil {
				continue // not written yet
			}
			buf, err := io.ReadAll(io.NewSectionReader(f, off, 1<<40))
			_ = f.Close()
			if err != nil {
				continue
			}
			off += int64(len(buf))
			rest = append(rest, buf...)
			now := time.Now()
			p.mu.Lock()
			for {
				i := bytes.IndexByte(rest, '\n')
				if i < 0 {
					break
				}
				fields := strings.Split(string(rest[:i]), "\t")
				rest = rest[i+1:]
				if len(fields) != 5 || fields[0] != "E" {
					continue
				}
				k := fields[1] + "\t" + fields[2] + "\t" + fields[3]
				if p.seen[k] {
					continue
				}
				p.seen[k] = true
				pl := fields[2]
				if p.n[pl] == 0 {
					p.first[pl] = now
				}
				p.n[pl]++
				p.last[pl] = now
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// summary says, for each plugin, how many items it finished and how
// long after began its last one was: "name: N items, last at 12.3 s
// (81 items/s)".
func (p *recordPace) summary(began time.Time) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for pl, n := range p.n {
		took := p.last[pl].Sub(began)
		out[pl] = fmt.Sprintf("%d items, the last %.1f s after the first backup (%.0f items/s)", n, took.Seconds(), float64(n)/took.Seconds())
	}
	return out
}
