package gc_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/retry"
)

// recorded returns the lines the recorder plugin wrote.
func (f *fixture) recorded() []string {
	f.t.Helper()
	b, err := os.ReadFile(f.record)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(f.t, err)
	return strings.Fields(strings.ReplaceAll(string(b), "\t", "|"))
}

// TestPluginsPerResource: every resource of a cascade is one item for
// the plugins whose selector takes it, in name order; done purges it.
func TestPluginsPerResource(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, true)
		o := f.res("Deployment", "web")
		p := f.res("Pod", "web-1", ownedBy(o, true))
		require.Equal(t, gc.OutcomePurged, f.del(o, gc.Foreground))
		f.requirePurged(o, p)
		require.ElementsMatch(t, []string{
			"test.lethe.io/a-first|pods/prod/web-1", "test.lethe.io/b-second|pods/prod/web-1", "test.lethe.io/c-pods|pods/prod/web-1",
			"test.lethe.io/a-first|deployments/prod/web", "test.lethe.io/b-second|deployments/prod/web",
		}, f.recorded())
	})
}

// TestPluginBlockedAndFailed: a blocked or failed plugin action holds the
// resource (and its foreground owner) in Deleting, stuck, with the next
// attempt after retryAfter or the backoff; later plugins wait; once the
// plugin is done the cascade completes.
func TestPluginBlockedAndFailed(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		for _, tc := range []struct{ file, content, outcome string }{
			{"web-1.lock", "1h", "blocked"},
			{"web-1.fail", "", "failed"},
		} {
			f := newFixture(t, st, true)
			o := f.res("Deployment", "web-"+tc.outcome)
			p := f.res("Pod", "web-1", func(r *catalog.Resource) { r.Namespace = tc.outcome }, ownedBy(o, true))
			require.NoError(t, os.WriteFile(filepath.Join(f.locks, tc.file), []byte(tc.content), 0o600))
			require.Equal(t, gc.OutcomeStuck, f.del(o, gc.Foreground))
			xp := f.requirePhase(p, catalog.PhaseDeleting)
			require.Contains(t, xp.Finalizers, catalog.FinalizerDeleteActions, "never purged with an unfinished plugin action")
			cond := stuck(xp)
			require.NotNil(t, cond)
			require.Equal(t, "PluginUnfinished", cond.Reason)
			require.Contains(t, cond.Message, "plugin test.lethe.io/a-first "+tc.outcome)
			f.requirePhase(o, catalog.PhaseDeleting)
			rows, err := f.st.ListRetries(f.ctx, catalog.RetryFilter{OwnerUID: p.UID})
			require.NoError(t, err)
			require.Len(t, rows, 1, "the unfinished plugin is a row of the retry queue")
			require.Equal(t, retry.KindResource, rows[0].Kind)
			require.Equal(t, "test.lethe.io/a-first", rows[0].Plugin)
			require.Equal(t, tc.outcome, rows[0].History[0].Outcome)
			require.Equal(t, 1, rows[0].Attempts)
			if tc.outcome == "blocked" {
				require.WithinDuration(t, time.Now().Add(time.Hour), rows[0].NextAttemptAt, 5*time.Minute, "retryAfter is kept")
			} else {
				require.WithinDuration(t, time.Now().Add(retry.BaseDefault), rows[0].NextAttemptAt, 10*time.Second, "the queue's backoff")
			}
			for _, l := range f.recorded() {
				require.NotContains(t, l, "b-second|pods/"+tc.outcome, "a later plugin waits for the unfinished one")
			}
			e, err := f.c.Explain(f.ctx, o.Key())
			require.NoError(t, err)
			require.Contains(t, e.WaitingFor[0].Reason, "plugin test.lethe.io/a-first "+tc.outcome)

			// Unblocked, and due: the retry completes it.
			require.NoError(t, os.Remove(filepath.Join(f.locks, tc.file)))
			f.skew.Add(int64(2 * time.Hour)) // the next attempt is due
			require.Equal(t, gc.OutcomePurged, f.drive(o))
			f.requirePurged(o, p)
			require.Contains(t, f.recorded(), "test.lethe.io/b-second|pods/"+tc.outcome+"/web-1")
			_, _, err = f.st.LoadProgress(f.ctx, p.UID)
			require.ErrorIs(t, err, catalog.ErrNotFound, "the plugin progress goes with the resource")
			rows, err = f.st.ListRetries(f.ctx, catalog.RetryFilter{OwnerUID: p.UID})
			require.NoError(t, err)
			require.Empty(t, rows, "the row goes when the plugin is done")
		}
	})
}

// TestPluginBatchKeepsEachResourcesProgress: the Deleting dependents a
// step hands to the plugins as one batch each keep their own progress
// and retry rows: stepping their owner again runs neither a plugin done
// on them nor one whose row is not due, on any of them; once due, each
// plugin has run exactly once on each, and the cascade completes.
func TestPluginBatchKeepsEachResourcesProgress(t *testing.T) {
	onDrivers(t, func(t *testing.T, st catalog.Store) {
		f := newFixture(t, st, true)
		o := f.res("Deployment", "batch")
		var pods []*catalog.Resource
		for i := range 4 {
			name := fmt.Sprintf("batch-%d", i)
			pods = append(pods, f.res("Pod", name, ownedBy(o, true)))
			require.NoError(t, os.WriteFile(filepath.Join(f.locks, name+".fail-b"), nil, 0o600))
		}
		count := func(line string) int {
			n := 0
			for _, l := range f.recorded() {
				if l == line {
					n++
				}
			}
			return n
		}
		require.Equal(t, gc.OutcomeStuck, f.del(o, gc.Foreground))
		for range 2 { // stepped again, in one batch, before the rows are due
			require.Equal(t, gc.OutcomeStuck, f.drive(o))
		}
		for _, p := range pods {
			x := f.requirePhase(p, catalog.PhaseDeleting)
			require.Contains(t, x.Finalizers, catalog.FinalizerDeleteActions, "never purged with an unfinished plugin action")
			require.Equal(t, 1, count("test.lethe.io/a-first|pods/"+p.Namespace+"/"+p.Name), "%s: a done plugin does not run again", p.Name)
			rows, err := f.st.ListRetries(f.ctx, catalog.RetryFilter{OwnerUID: p.UID})
			require.NoError(t, err)
			require.Len(t, rows, 1, p.Name)
			require.Equal(t, "test.lethe.io/b-second", rows[0].Plugin)
			require.Equal(t, 1, rows[0].Attempts, "%s: no attempt before the row is due", p.Name)
		}
		for _, p := range pods {
			require.NoError(t, os.Remove(filepath.Join(f.locks, p.Name+".fail-b")))
		}
		f.skew.Add(int64(2 * time.Hour)) // every row is due
		require.Equal(t, gc.OutcomePurged, f.drive(o))
		f.requirePurged(append(pods, o)...)
		for _, p := range pods {
			for _, pl := range []string{"a-first", "b-second"} {
				require.Equal(t, 1, count("test.lethe.io/"+pl+"|pods/"+p.Namespace+"/"+p.Name), "%s on %s", pl, p.Name)
			}
		}
	})
}
