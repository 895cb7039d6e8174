package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/retention"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// gfsPolicyYAML is the README's example policy, in dryRun.
const gfsPolicyYAML = `kind: RetentionPolicy
metadata: {name: nightly-gfs}
spec:
  selector: velero.io/schedule-name=nightly
  groupBy: [velero.io/schedule-name]
  keepLast: 3
  keepDaily: 7
  keepWeekly: 5
  keepMonthly: 12
  keepYearly: 2
  minSuccessful: 3
  timeZone: Europe/Berlin
  deletionDelay: 24h
`

type retentionPlanOut struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Policies   []struct {
		Name   string `json:"name"`
		Mode   string `json:"mode"`
		Keep   int    `json:"keep"`
		Delete int    `json:"delete"`
	} `json:"policies"`
	Items []struct {
		Policy  string    `json:"policy"`
		Backup  string    `json:"backup"`
		Group   string    `json:"group"`
		Created time.Time `json:"created"`
		Phase   string    `json:"phase"`
		Action  string    `json:"action"`
		Reasons []string  `json:"reasons"`
	} `json:"items"`
	Warnings []string `json:"warnings"`
}

// veleroNightlies lays out, in the storage folder, as Velero 1.18 does, n
// nightly backups of schedule, one a day at 03:00 UTC, the newest
// yesterday, each with a TTL of ten years; phases and extra labels by
// age in days. It returns the
// backups as the engine should see them.
func (e *env) veleroNightlies(schedule string, n int, phases map[int]string, extra map[int]map[string]string) []retention.Backup {
	e.t.Helper()
	return e.veleroNightliesTTL(schedule, n, 10*365*24*time.Hour, phases, extra)
}

// veleroNightliesTTL is veleroNightlies with the backups' spec.ttl.
func (e *env) veleroNightliesTTL(schedule string, n int, ttl time.Duration, phases map[int]string, extra map[int]map[string]string) []retention.Backup {
	e.t.Helper()
	var tb bytes.Buffer
	require.NoError(e.t, archivetest.Write(&tb, velerotest.Items(), archivetest.Options{}))
	last := time.Now().UTC().Truncate(24 * time.Hour).Add(-21 * time.Hour)
	var out []retention.Backup
	for i := range n {
		created := last.AddDate(0, 0, -i)
		name := schedule + "-" + created.Format("20060102150405")
		obj := velerotest.BackupObject(name)
		md := obj["metadata"].(map[string]any)
		md["creationTimestamp"] = created.Format(time.RFC3339)
		lbls := md["labels"].(map[string]any)
		lbls["velero.io/schedule-name"] = schedule
		want := map[string]string{"velero.io/storage-location": "default", "app": "shop", "velero.io/schedule-name": schedule}
		for k, v := range extra[i] {
			lbls[k] = v
			want[k] = v
		}
		phase := retention.PhaseCompleted
		if p, ok := phases[i]; ok {
			phase = p
		}
		obj["status"].(map[string]any)["phase"] = phase
		// The generated 720h from April would have expired them all.
		obj["spec"].(map[string]any)["ttl"] = ttl.String()
		delete(obj["status"].(map[string]any), "expiration")
		meta, err := json.Marshal(obj)
		require.NoError(e.t, err)
		dir := filepath.Join(e.storageDir(), filepath.FromSlash(velero.BackupDir(name)))
		require.NoError(e.t, os.MkdirAll(dir, 0o750))
		require.NoError(e.t, os.WriteFile(filepath.Join(e.storageDir(), filepath.FromSlash(velero.MetadataKey(name))), meta, 0o600))
		require.NoError(e.t, os.WriteFile(filepath.Join(e.storageDir(), filepath.FromSlash(velero.TarballKey(name))), tb.Bytes(), 0o600))
		out = append(out, retention.Backup{Name: name, Created: created, Phase: phase, Labels: want, StorageLocation: "default"})
	}
	return out
}

func (e *env) retentionPlan(args ...string) retentionPlanOut {
	e.t.Helper()
	r := e.ok(append([]string{"retention", "plan", "-o", "json"}, args...)...)
	var out retentionPlanOut
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &out), "%s", r)
	return out
}

// TestRetentionPlanOfAGFSPolicyOver400VeleroNightlies: 400 days of
// nightly backups in a Velero-layout bucket, synced, under the README's
// GFS policy: the binary's plan is the engine's, backup for backup, with
// the guards visible (an unfinished backup and a held one kept, a failed
// one deleted after failedRetention), and nothing is deleted by a plan.
func TestRetentionPlanOfAGFSPolicyOver400VeleroNightlies(t *testing.T) {
	e := newEnv(t, pluginNoop)
	nightly := e.veleroNightlies("nightly", 400,
		map[int]string{0: "InProgress", 2: retention.PhasePartiallyFailed, 4: retention.PhaseFailed, 40: retention.PhaseFailed},
		map[int]map[string]string{250: {"lethe.io/retain": "true"}})
	e.veleroNightlies("weekly", 3, nil, nil)
	e.ok("backup", "sync")

	rep := e.applyJSON(0, "-f", e.writeFile("gfs.yaml", gfsPolicyYAML))
	require.Equal(t, map[string]string{"nightly-gfs": "created"}, rep.actions())

	plan := e.retentionPlan("nightly-gfs")
	require.Equal(t, "lethe.io/v1", plan.APIVersion)
	require.Equal(t, "RetentionPlan", plan.Kind)
	require.Len(t, plan.Items, 400, "the weekly schedule is not selected")

	docs, err := manifest.Parse(manifest.Source{Name: "gfs.yaml", Data: []byte(gfsPolicyYAML)}, manifest.DefaultLimits)
	require.NoError(t, err)
	rp, err := manifest.ParseRetentionPolicy(docs[0])
	require.NoError(t, err)
	want := retention.Evaluate(rp.Policy, nightly, time.Now())
	require.Len(t, want.Items, 400)
	for i, it := range plan.Items {
		w := want.Items[i]
		require.Equal(t, []any{w.Backup, w.Group, string(w.Action), w.Reasons, w.Phase}, []any{it.Backup, it.Group, it.Action, it.Reasons, it.Phase}, "item %d", i)
		require.True(t, w.Created.Equal(it.Created))
	}
	byName := map[string]int{}
	for i, it := range plan.Items {
		byName[it.Backup] = i
	}
	item := func(age int) (string, []string) {
		it := plan.Items[byName[nightly[age].Name]]
		return it.Action, it.Reasons
	}
	a, r := item(0)
	require.Equal(t, "keep", a)
	require.Contains(t, r[0], "unfinished")
	a, r = item(250)
	require.Equal(t, "keep", a)
	require.Equal(t, "hold lethe.io/retain=true", r[0])
	a, _ = item(4)
	require.Equal(t, "keep", a, "failed 4 days ago: within failedRetention")
	a, r = item(40)
	require.Equal(t, "delete", a)
	require.Contains(t, r[0], "older than failedRetention")
	a, r = item(1)
	require.Equal(t, "keep", a)
	require.Equal(t, []string{"keepLast", "keepDaily", "keepWeekly", "keepMonthly", "keepYearly"}, r, "the newest counted backup")
	kept := 0
	for _, it := range plan.Items {
		if it.Action == "keep" {
			kept++
		}
	}
	// GFS over 400 dailies keeps about 3+7+5+12+2 minus overlaps, plus the
	// guards' three; never more than that.
	require.Less(t, kept, 3+7+5+12+2+3)
	require.Greater(t, kept, 12)
	require.Equal(t, []struct {
		Name   string `json:"name"`
		Mode   string `json:"mode"`
		Keep   int    `json:"keep"`
		Delete int    `json:"delete"`
	}{{"nightly-gfs", "dryRun", kept, 400 - kept}}, plan.Policies)

	table := e.ok("retention", "plan").stdout
	require.Contains(t, table, fmt.Sprintf("RetentionPolicy nightly-gfs: keep %d, delete %d; plan only (mode dryRun): nothing is deleted.", kept, 400-kept))
	require.Contains(t, table, "hold lethe.io/retain=true")

	// A plan changes nothing.
	for _, b := range e.list() {
		require.Equal(t, "Active", b.Phase, b.Name)
	}
	require.Len(t, e.list(), 403)
}

// TestRetentionPolicyBadInputThroughTheBinary: each refusal is one line,
// exit 1 as for every refused manifest, and nothing is stored; a selector
// that matches nothing is a warning, not an error; an unknown policy is
// "not found".
func TestRetentionPolicyBadInputThroughTheBinary(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ spec, want string }{
		{"{keepLast: 3, keepEverything: true}", "spec.keepEverything: unknown field; allowed: selector"},
		{"{keepDaily: -3}", "spec.keepDaily: -3 is negative: use a count, 0 (off) or -1 (unlimited)"},
		{"{keepDaily: 7, timeZone: Europe/Atlantis}", `spec.timeZone: unknown time zone "Europe/Atlantis"`},
		{"{keepDaily: 7, mode: yolo}", `spec.mode: invalid mode "yolo"`},
	} {
		f := e.writeFile("bad.yaml", "kind: RetentionPolicy\nmetadata: {name: bad}\nspec: "+c.spec+"\n")
		r := e.run("apply", "-f", f)
		requireOneErrorLine(t, r, c.want)
		require.Equal(t, 1, r.code, "%s", r)
		require.Contains(t, r.stderr, "bad.yaml, document 1 (RetentionPolicy/bad)")
	}
	r := e.run("retention", "plan", "bad")
	requireOneErrorLine(t, r, `RetentionPolicy "bad" not found`)
	require.Equal(t, 4, r.code)
	r = e.run("retention", "plan")
	requireOneErrorLine(t, r, "no RetentionPolicy in the catalog")
	require.Equal(t, 4, r.code)

	e.applyJSON(0, "-f", e.writeFile("p.yaml", "kind: RetentionPolicy\nmetadata: {name: nothing}\nspec: {selector: velero.io/schedule-name=none, keepLast: 1}\n"))
	r = e.ok("retention", "plan", "nothing", "-o", "json")
	require.Equal(t, "lethe: warning: RetentionPolicy nothing: selector \"velero.io/schedule-name=none\" matches no backup\n", r.stderr)
	var out retentionPlanOut
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Empty(t, out.Items)
	require.Equal(t, []string{`RetentionPolicy nothing: selector "velero.io/schedule-name=none" matches no backup`}, out.Warnings)
	require.True(t, slices.Equal([]string{"nothing"}, []string{out.Policies[0].Name}))
}
