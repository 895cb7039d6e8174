package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// TestCascadeCrashResume SIGKILLs the `lethe delete --wait` process that
// drives a cascade at five or more random points, then lets a last run
// finish it, and checks that nothing was lost: no resource was purged
// before its blocking dependents, the block reference was never
// bypassed, every plugin ran at least once on every resource, and every
// resource was purged exactly once (one tombstone, one purge audit entry).
func TestCascadeCrashResume(t *testing.T) {
	t.Parallel()
	const (
		pods     = 1500
		minKills = 5
	)
	e := newEnv(t, pluginRecorder)
	ctx := catalog.WithActor(context.Background(), "test")
	url := "sqlite://" + filepath.Join(e.home, "lethe.db")
	st, err := drivers.Open(ctx, url, nil)
	require.NoError(t, err)

	// nightly owns pods (blockOwnerDeletion); every 10th pod owns a
	// snapshot; restore r, also owned by nightly, holds a block
	// reference to pod p-0, which must outlive it.
	all := map[string]*catalog.Resource{}
	add := func(r *catalog.Resource) *catalog.Resource {
		out, err := st.Create(ctx, r)
		require.NoError(t, err)
		all[out.UID] = out
		return out
	}
	own := func(o *catalog.Resource) []catalog.OwnerRef {
		return []catalog.OwnerRef{{UID: o.UID, Kind: o.Kind, Name: o.Name, BlockOwnerDeletion: true}}
	}
	root := add(&catalog.Resource{Kind: "Schedule", Namespace: "prod", Name: "nightly"})
	var p0 *catalog.Resource
	for i := range pods {
		p := add(&catalog.Resource{Kind: "Pod", Namespace: "prod", Name: fmt.Sprintf("p-%d", i), Owners: own(root)})
		if i == 0 {
			p0 = p
		}
		if i%10 == 0 {
			add(&catalog.Resource{Kind: "Snapshot", Namespace: "prod", Name: fmt.Sprintf("s-%d", i), Owners: own(p)})
		}
	}
	restore := add(&catalog.Resource{Kind: "Restore", Namespace: "prod", Name: "r", Owners: own(root),
		References: []catalog.Reference{{Kind: "Pod", Namespace: "prod", Name: p0.Name, OnTargetDelete: catalog.RefBlock}}})
	require.NoError(t, st.Close())

	// Bytes of record one full run writes: a line per plugin and resource.
	var fullRun int64
	for _, r := range all {
		line := int64(len(strings.ToLower(r.Kind)) + 1 + len(r.Namespace) + len(r.Name) + 4)
		fullRun += 2*line + int64(len(recFirst)+len(recSecond))
		if r.Kind == "Pod" {
			fullRun += line + int64(len(recPods))
		}
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (kill points are random)", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	args := []string{"delete", "Schedule", "nightly", "-n", "prod", "--yes", "--wait"}
	kills := 0
	for attempt := 0; kills < minKills; attempt++ {
		require.Less(t, attempt, 3*minKills, "could not kill lethe mid-cascade %d times", minKills)
		before := fileSize(e.record)
		remaining := max(fullRun-before, 2)
		growth := 1 + rng.Int64N(max(remaining/(minKills+1-int64(kills)), 2))
		delay := cmdTimeout
		if rng.IntN(4) == 0 {
			delay = time.Duration(rng.Int64N(int64(600 * time.Millisecond)))
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
		checkCascadeInvariants(t, url, all, restore, p0, false)
	}
	// The last run completes the cascade (or finds the root already gone).
	r := e.run(args...)
	require.Contains(t, []int{0, 4}, r.code, "%s", r)
	checkCascadeInvariants(t, url, all, restore, p0, true)

	// Every plugin ran at least once on every resource.
	seen := uniq(readLines(t, e.record))
	for _, r := range all {
		key := strings.ToLower(r.Kind) + "s/" + r.Namespace + "/" + r.Name
		plugins := []string{recFirst, recSecond}
		if r.Kind == "Pod" {
			plugins = append(plugins, recPods)
		}
		for _, pl := range plugins {
			require.True(t, seen[pl+"\t"+key], "plugin %s never ran on %s", pl, key)
		}
	}
}

// checkCascadeInvariants reads the catalog: every purge happened once
// and after the purges of the resource's blocking dependents and of the
// block referrer; with done, everything is purged.
func checkCascadeInvariants(t *testing.T, url string, all map[string]*catalog.Resource, restore, p0 *catalog.Resource, done bool) {
	t.Helper()
	ctx := context.Background()
	st, err := drivers.Open(ctx, url, nil)
	require.NoError(t, err)
	defer st.Close()
	es, err := st.ListAudit(ctx, catalog.AuditFilter{})
	require.NoError(t, err)
	purged := map[string]int64{}
	for _, e := range es {
		if e.Action != "purge" && e.Action != "force-purge" {
			continue
		}
		require.Equal(t, "purge", e.Action, "%s/%s was force-purged", e.Kind, e.Name)
		_, twice := purged[e.UID]
		require.False(t, twice, "%s/%s purged twice", e.Kind, e.Name)
		purged[e.UID] = e.ID
	}
	for uid, id := range purged {
		r := all[uid]
		require.NotNil(t, r, "purged a resource the test did not make: %s", uid)
		for _, d := range all {
			if slices.ContainsFunc(d.Owners, func(o catalog.OwnerRef) bool { return o.UID == uid && o.BlockOwnerDeletion }) {
				did, ok := purged[d.UID]
				require.True(t, ok && did < id, "%s purged before its blocking dependent %s", r.Key(), d.Key())
			}
		}
	}
	if id, ok := purged[p0.UID]; ok {
		rid, rok := purged[restore.UID]
		require.True(t, rok && rid < id, "block reference bypassed: %s purged while %s held it", p0.Key(), restore.Key())
	}
	if done {
		require.Len(t, purged, len(all), "every resource is purged")
		for uid, r := range all {
			ts, err := st.GetTombstone(ctx, r.Key())
			require.NoError(t, err)
			require.Equal(t, uid, ts.UID)
		}
	}
}
