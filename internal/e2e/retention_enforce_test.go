package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type auditOut struct {
	Actor    string `json:"actor"`
	Action   string `json:"action"`
	Reason   string `json:"reason"`
	Resource struct {
		Name string `json:"name"`
	} `json:"resource"`
}

func (e *env) audit(name string) []auditOut {
	e.t.Helper()
	r := e.ok("audit", "--kind", "Backup", "--name", name, "-o", "json")
	var out []auditOut
	for _, it := range listItems(e.t, r.stdout, "AuditEntry") {
		var a auditOut
		require.NoError(e.t, json.Unmarshal(it, &a), "%s", r)
		out = append(out, a)
	}
	return out
}

// phases returns each backup's catalog phase.
func (e *env) phases() map[string]string {
	out := map[string]string{}
	for _, b := range e.list() {
		out[b.Name] = b.Phase
	}
	return out
}

// waitPhases polls until cond holds on the backups' phases.
func (e *env) waitPhases(srv *proc, what string, cond func(map[string]string) bool) map[string]string {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ph := e.phases()
		if cond(ph) {
			return ph
		}
		if srv.exited() {
			e.t.Fatalf("server exited: %s", srv.wait(e.t))
		}
		if time.Now().After(deadline) {
			_ = srv.cmd.Process.Signal(syscall.SIGTERM)
			e.t.Fatalf("%s: never happened; phases %v\n%s", what, ph, srv.wait(e.t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func stopServer(t *testing.T, srv *proc) {
	t.Helper()
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
	r := srv.wait(t)
	require.Equal(t, 0, r.code, "%s", r)
}

// TestEnforcedRetentionSchedulesThePlansDeletionsAndAnUndeleteSticks is
// issue 30 through the binary: the server carries out an enforced
// policy's plan, softly (Scheduled with the policy's deletionDelay, so
// nothing is purged inside the grace window), audited with the policy's
// name; an undelete of one of those backups puts the lethe.io/retain hold
// on it, audited, and the policy does not schedule it again.
func TestEnforcedRetentionSchedulesThePlansDeletionsAndAnUndeleteSticks(t *testing.T) {
	e := newEnv(t, pluginNoop)
	e.veleroNightlies("nightly", 20, nil, nil)
	e.ok("backup", "sync")
	policy := e.writeFile("p.yaml", `kind: RetentionPolicy
metadata: {name: last-five}
spec:
  selector: velero.io/schedule-name=nightly
  keepLast: 5
  deletionDelay: 1h
  mode: enforce
`)
	// apply shows what switching to enforce will delete, before it writes.
	r := e.ok("apply", "-f", policy)
	require.Contains(t, r.stderr, "lethe: RetentionPolicy last-five switches to enforce: keep 5, delete 15 (")
	require.Contains(t, r.stderr, "and 5 more); 'lethe retention plan last-five' shows every backup and why\n")
	require.NotContains(t, e.ok("apply", "-f", policy).stderr, "switches to enforce", "already enforced")
	plan := e.retentionPlan("last-five")
	var del []string
	for _, it := range plan.Items {
		if it.Action == "delete" {
			del = append(del, it.Backup)
		}
	}
	require.Len(t, del, 15)

	e.ok("plugin", "lock") // lethe server runs pinned plugins only
	srv := e.start("server", "--retention-interval", "1s", "--metrics-addr", freePort(t))
	began := time.Now()
	ph := e.waitPhases(srv, "the plan's 15 deletions scheduled", func(ph map[string]string) bool {
		n := 0
		for _, p := range ph {
			if p == "Scheduled" {
				n++
			}
		}
		return n >= 15
	})
	for _, it := range plan.Items {
		want := map[string]string{"keep": "Active", "delete": "Scheduled"}[it.Action]
		require.Equal(t, want, ph[it.Backup], it.Backup)
	}
	victim := del[0]
	b := e.get(victim)
	require.NotNil(t, b.DueAt)
	require.WithinDuration(t, began.Add(time.Hour), *b.DueAt, 2*time.Minute, "the policy's deletionDelay is the grace window")
	entries := e.audit(victim)
	i := slices.IndexFunc(entries, func(a auditOut) bool { return a.Action == "schedule" })
	require.GreaterOrEqual(t, i, 0, "%v", entries)
	require.Regexp(t, `^retention:last-five \(leader term \d+\)$`, entries[i].Actor, "the policy's name, and the server's leader term")
	require.Equal(t, "RetentionPolicy last-five: no keep rule matched", entries[i].Reason)

	// Undelete inside the grace window: Active, held, audited; the
	// policy leaves it alone from then on.
	out := e.ok("backup", "undelete", victim).stdout
	require.Contains(t, out, "A RetentionPolicy had scheduled it, so it is now held (label lethe.io/retain=true)")
	b = e.get(victim)
	require.Equal(t, "Active", b.Phase)
	require.Equal(t, "true", b.Labels["lethe.io/retain"])
	require.Contains(t, b.Annotations["lethe.io/retain-reason"], "after RetentionPolicy last-five scheduled it")
	entries = e.audit(victim)
	last := entries[len(entries)-1]
	require.Equal(t, "undelete", last.Action)
	require.Contains(t, last.Reason, "held from RetentionPolicy last-five (lethe.io/retain=true)")
	// The undelete's change wakes the enforcer (2s debounce) and the
	// interval is 1s: give it several runs. Nothing to wait on, since
	// what is checked is that nothing happens.
	time.Sleep(5 * time.Second)
	require.Equal(t, "Active", e.get(victim).Phase)
	require.Len(t, slices.DeleteFunc(e.audit(victim), func(a auditOut) bool { return a.Action != "schedule" }), 1)

	// The plan shows why.
	for _, it := range e.retentionPlan("last-five").Items {
		if it.Backup == victim {
			require.Equal(t, "keep", it.Action)
			require.Equal(t, "hold lethe.io/retain=true", it.Reasons[0])
		}
	}
	stopServer(t, srv)
}

// TestMaxDeletesPerRunStopsAPolicyThatWouldDeleteEverything: a policy
// whose rules keep nothing it selects (a keepLabels selector that
// matches no backup) deletes only maxDeletesPerRun backups, the oldest,
// and no more before the next interval, however many changes follow.
func TestMaxDeletesPerRunStopsAPolicyThatWouldDeleteEverything(t *testing.T) {
	e := newEnv(t, pluginNoop)
	bs := e.veleroNightlies("nightly", 12, nil, nil)
	e.ok("backup", "sync")
	e.applyJSON(0, "-f", e.writeFile("p.yaml", `kind: RetentionPolicy
metadata: {name: oops}
spec:
  keepLabels: [keep=please]
  maxDeletesPerRun: 3
  deletionDelay: 1h
  mode: enforce
`))
	plan := e.retentionPlan("oops")
	require.Equal(t, 3, plan.Policies[0].Delete)
	require.Len(t, plan.Warnings, 1)
	require.Contains(t, plan.Warnings[0], "would delete 12 backups, maxDeletesPerRun is 3")

	e.ok("plugin", "lock") // lethe server runs pinned plugins only
	srv := e.start("server", "--retention-interval", "1h", "--metrics-addr", freePort(t))
	e.waitPhases(srv, "three scheduled", func(ph map[string]string) bool {
		n := 0
		for _, p := range ph {
			if p == "Scheduled" {
				n++
			}
		}
		return n >= 3
	})
	// More changes: a backup undeleted and a policy re-applied. Neither
	// starts another run before the interval.
	e.ok("backup", "undelete", bs[11].Name)
	e.applyJSON(0, "-f", e.writeFile("p2.yaml", strings.ReplaceAll(`kind: RetentionPolicy
metadata: {name: oops}
spec:
  keepLabels: [keep=please]
  maxDeletesPerRun: 3
  deletionDelay: 2h
  mode: enforce
`, "\t", "")))
	time.Sleep(5 * time.Second) // nothing may happen: no signal to wait on
	ph := e.phases()
	var scheduled []string
	for _, b := range bs {
		if ph[b.Name] == "Scheduled" {
			scheduled = append(scheduled, b.Name)
		}
	}
	require.Equal(t, []string{bs[9].Name, bs[10].Name}, scheduled, "the three oldest went, one was undeleted, no more")
	stopServer(t, srv)
}

// TestOverrideTTLLeavesExpiredBackupsToThePolicy: the server requests the
// deletion of expired backups, except those that a policy with
// overrideTTL selects (even in dryRun): that policy alone decides.
func TestOverrideTTLLeavesExpiredBackupsToThePolicy(t *testing.T) {
	e := newEnv(t, pluginNoop)
	owned := e.veleroNightliesTTL("owned", 2, time.Hour, nil, nil)
	other := e.veleroNightliesTTL("other", 2, time.Hour, nil, nil)
	e.ok("backup", "sync")
	e.applyJSON(0, "-f", e.writeFile("p.yaml", `kind: RetentionPolicy
metadata: {name: owner}
spec:
  selector: velero.io/schedule-name=owned
  keepLast: -1
  overrideTTL: true
`))
	e.ok("plugin", "lock") // lethe server runs pinned plugins only
	srv := e.start("server", "--metrics-addr", freePort(t))
	e.waitPhases(srv, "the expired backups of no overriding policy leave Active", func(ph map[string]string) bool {
		return ph[other[0].Name] != "Active" && ph[other[1].Name] != "Active"
	})
	// The TTL controller requests every due backup in one pass; the two
	// owned ones expired as the others did. Nothing else to wait on.
	time.Sleep(2 * time.Second)
	ph := e.phases()
	require.Equal(t, "Active", ph[owned[0].Name])
	require.Equal(t, "Active", ph[owned[1].Name])
	stopServer(t, srv)
}
