package planner_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/retention/planner"
)

func openStore(t *testing.T) catalog.Store {
	t.Helper()
	st, err := drivers.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "c.db"), &catalog.Config{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

var t0 = time.Date(2026, 10, 1, 3, 0, 0, 0, time.UTC)

// addNightlies registers n backups of schedule, one a day, name-i being
// i days old... oldest first: schedule-0 is the oldest.
func addNightlies(t *testing.T, st catalog.Store, schedule string, n int) {
	t.Helper()
	for i := range n {
		created := t0.AddDate(0, 0, i)
		name := fmt.Sprintf("%s-%d", schedule, i)
		b := &backup.Backup{Resource: &catalog.Resource{Kind: backup.Kind, Name: name, Labels: map[string]string{"velero.io/schedule-name": schedule}},
			Spec: backup.Spec{StorageKey: backup.StorageKey(name), CreatedAt: &created}}
		require.NoError(t, b.Encode())
		_, err := st.Create(context.Background(), b.Resource)
		require.NoError(t, err)
	}
}

func addPolicy(t *testing.T, st catalog.Store, name, spec string) {
	t.Helper()
	_, err := st.Create(context.Background(), &catalog.Resource{Kind: "RetentionPolicy", Name: name, Spec: []byte(spec)})
	require.NoError(t, err)
}

type call struct {
	actor, policy, backup string
	delay                 *time.Duration
	reason                string
}

type recorder struct {
	mu    sync.Mutex
	calls []call
	hook  func(c call)
}

func (r *recorder) delete(ctx context.Context, policy, name string, delay *time.Duration, reason string) error {
	c := call{actor: catalog.ActorFrom(ctx), policy: policy, backup: name, delay: delay, reason: reason}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		hook(c)
	}
	return nil
}

func (r *recorder) backups() []string {
	var out []string
	for _, c := range r.calls {
		out = append(out, c.backup)
	}
	slices.Sort(out)
	return out
}

func enforcer(t *testing.T, st catalog.Store, rec *recorder) *planner.Enforcer {
	t.Helper()
	e, err := planner.NewEnforcer(&planner.EnforcerConfig{Store: st, Delete: rec.delete, Now: func() time.Time { return t0.AddDate(1, 0, 0) }})
	require.NoError(t, err)
	return e
}

func TestOnlyEnforcedPoliciesRequestDeletionsAuditedWithTheirName(t *testing.T) {
	st := openStore(t)
	addNightlies(t, st, "a", 6)
	addNightlies(t, st, "b", 6)
	addPolicy(t, st, "pa", `{"selector":"velero.io/schedule-name=a","keepLast":2,"deletionDelay":"36h","mode":"enforce"}`)
	addPolicy(t, st, "pb", `{"selector":"velero.io/schedule-name=b","keepLast":2}`)
	rec := &recorder{}
	capped, err := enforcer(t, st, rec).RunOnce(context.Background())
	require.NoError(t, err)
	require.False(t, capped)
	require.Equal(t, []string{"a-0", "a-1", "a-2", "a-3"}, rec.backups(), "pb is in dryRun")
	for _, c := range rec.calls {
		require.Equal(t, "retention:pa", c.actor)
		require.Equal(t, "pa", c.policy)
		require.NotNil(t, c.delay)
		require.Equal(t, 36*time.Hour, *c.delay)
		require.Equal(t, "RetentionPolicy pa: no keep rule matched", c.reason)
	}
}

func TestADryRunPolicyThatKeepsABackupStopsAnEnforcedOne(t *testing.T) {
	st := openStore(t)
	addNightlies(t, st, "a", 6)
	addPolicy(t, st, "short", `{"keepLast":1,"mode":"enforce"}`)
	addPolicy(t, st, "longer", `{"keepLast":3}`)
	rec := &recorder{}
	_, err := enforcer(t, st, rec).RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"a-0", "a-1", "a-2"}, rec.backups())
}

// TestTheEnforcerRechecksEachBackupBeforeDeletingIt: a hold put on a
// backup after the plan was made wins.
func TestTheEnforcerRechecksEachBackupBeforeDeletingIt(t *testing.T) {
	st := openStore(t)
	addNightlies(t, st, "a", 6)
	addPolicy(t, st, "p", `{"keepLast":1,"mode":"enforce"}`)
	rec := &recorder{}
	rec.hook = func(c call) {
		if c.backup != "a-4" {
			return
		}
		// While a-4 (the newest to go) is requested, someone holds a-1,
		// planned for deletion too.
		r, err := st.Get(context.Background(), backup.Key("a-1"))
		require.NoError(t, err)
		r.Labels["lethe.io/retain"] = "true"
		_, err = st.Update(context.Background(), r)
		require.NoError(t, err)
	}
	_, err := enforcer(t, st, rec).RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"a-0", "a-2", "a-3", "a-4"}, rec.backups())
}

func TestAStoredPolicyThatNoLongerValidatesStopsThePlan(t *testing.T) {
	st := openStore(t)
	addNightlies(t, st, "a", 3)
	addPolicy(t, st, "bad", `{"keepLast":-7,"mode":"enforce"}`)
	rec := &recorder{}
	_, err := enforcer(t, st, rec).RunOnce(context.Background())
	require.ErrorContains(t, err, "stored RetentionPolicy bad no longer validates")
	require.ErrorContains(t, err, "spec.keepLast: -7 is negative")
	require.Empty(t, rec.calls)
}

func TestOverrideTTLLeavesTheBackupsItSelectsToThePolicy(t *testing.T) {
	st := openStore(t)
	addNightlies(t, st, "a", 1)
	addNightlies(t, st, "b", 1)
	addPolicy(t, st, "owns-a", `{"selector":"velero.io/schedule-name=a","keepLast":1,"overrideTTL":true}`)
	addPolicy(t, st, "watches-b", `{"selector":"velero.io/schedule-name=b","keepLast":1}`)
	ctx := context.Background()
	for name, want := range map[string]string{"a-0": "owns-a", "b-0": ""} {
		r, err := st.Get(ctx, backup.Key(name))
		require.NoError(t, err)
		got, err := planner.OverridingTTL(ctx, st, r)
		require.NoError(t, err)
		require.Equal(t, want, got, name)
	}
}

// TestACappedPolicyWaitsForTheNextInterval: once maxDeletesPerRun held a
// policy back, runs started by changes request nothing for it until an
// interval has passed; other policies go on.
func TestACappedPolicyWaitsForTheNextInterval(t *testing.T) {
	st := openStore(t)
	addNightlies(t, st, "a", 8)
	addNightlies(t, st, "b", 4)
	addPolicy(t, st, "capped", `{"selector":"velero.io/schedule-name=a","keepLast":1,"maxDeletesPerRun":2,"mode":"enforce"}`)
	addPolicy(t, st, "free", `{"selector":"velero.io/schedule-name=b","keepLast":1,"mode":"enforce"}`)
	now := t0.AddDate(1, 0, 0)
	rec := &recorder{}
	e, err := planner.NewEnforcer(&planner.EnforcerConfig{Store: st, Delete: rec.delete, Interval: time.Hour, Now: func() time.Time { return now }})
	require.NoError(t, err)
	ctx := context.Background()

	capped, err := e.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, capped)
	require.Equal(t, []string{"a-0", "a-1", "b-0", "b-1", "b-2"}, rec.backups(), "the two oldest of a")

	rec.calls = nil
	now = now.Add(59 * time.Minute) // a change starts a run within the interval
	_, err = e.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"b-0", "b-1", "b-2"}, rec.backups(), "capped waits; free goes on (the recorder deletes nothing, so b's plan repeats)")

	rec.calls = nil
	now = now.Add(2 * time.Minute)
	_, err = e.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a-0", "a-1", "b-0", "b-1", "b-2"}, rec.backups(), "an interval later, the next batch")
}
