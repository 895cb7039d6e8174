package retention

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"
)

var day0 = time.Date(2026, 11, 1, 3, 0, 0, 0, time.UTC)

// nightly returns n nightly backups of schedule, newest last.
func nightly(schedule string, n int, phase string) []Backup {
	var out []Backup
	for i := range n {
		out = append(out, Backup{Name: fmt.Sprintf("%s-%03d", schedule, i), Created: day0.AddDate(0, 0, i), Phase: phase,
			Labels: map[string]string{DefaultGroupBy: schedule}})
	}
	return out
}

func policy(r Rules) *Policy {
	return &Policy{Name: "p", GroupBy: []string{DefaultGroupBy}, Rules: r, CountPhases: DefaultCountPhases(), FailedRetention: DefaultFailedRetention}
}

func actions(p *Plan) map[string]Action {
	out := map[string]Action{}
	for _, it := range p.Items {
		out[it.Backup] = it.Action
	}
	return out
}

func reasons(p *Plan, name string) []string {
	for _, it := range p.Items {
		if it.Backup == name {
			return it.Reasons
		}
	}
	return nil
}

func TestUnfinishedBackupsAreNeverDeleted(t *testing.T) {
	bs := nightly("n", 10, PhaseCompleted)
	for i, ph := range []string{"InProgress", "", "WaitingForPluginOperations", "Finalizing", "Deleting", "SomethingNew"} {
		bs[i].Phase = ph
		bs[i].Created = day0.AddDate(-1, 0, -i) // old enough for every rule and failedRetention
	}
	plan := Evaluate(policy(Rules{Last: 1}), bs, day0.AddDate(1, 0, 0))
	for i := range 6 {
		require.Equal(t, Keep, actions(plan)[bs[i].Name], bs[i].Phase)
		require.Contains(t, reasons(plan, bs[i].Name)[0], "unfinished")
	}
	require.Equal(t, 3, plan.Deletes())
}

func TestTheRetainLabelHoldsABackupAgainstEveryRule(t *testing.T) {
	bs := nightly("n", 5, PhaseCompleted)
	bs[0].Labels[HoldLabel] = HoldValue
	bs[1].Phase = PhaseFailed
	bs[1].Labels[HoldLabel] = HoldValue
	bs[2].Labels[HoldLabel] = "false"
	plan := Evaluate(policy(Rules{Last: 1}), bs, day0.AddDate(1, 0, 0))
	a := actions(plan)
	require.Equal(t, Keep, a["n-000"])
	require.Equal(t, Keep, a["n-001"], "a held failed backup outlives failedRetention")
	require.Equal(t, Delete, a["n-002"], "only the value true holds")
	require.Equal(t, Delete, a["n-003"])
	require.Equal(t, Keep, a["n-004"])
	require.Equal(t, "hold lethe.io/retain=true", reasons(plan, "n-000")[0])
}

func TestMinSuccessfulKeepsTheNewestCompletedBackupsOfEachGroup(t *testing.T) {
	bs := append(nightly("a", 6, PhaseCompleted), nightly("b", 2, PhaseCompleted)...)
	bs[5].Phase = PhasePartiallyFailed // a-005, the newest of a: counted, kept by keepLast, but not Completed
	p := policy(Rules{Last: 1})
	p.MinSuccessful = 3
	plan := Evaluate(p, bs, day0.AddDate(1, 0, 0))
	a := actions(plan)
	require.Equal(t, Keep, a["a-005"])
	require.Equal(t, []string{"keepLast"}, reasons(plan, "a-005"))
	for _, n := range []string{"a-004", "a-003", "a-002"} {
		require.Equal(t, Keep, a[n], n)
		require.Equal(t, []string{"minSuccessful 3"}, reasons(plan, n))
	}
	require.Equal(t, Delete, a["a-001"])
	require.Equal(t, Delete, a["a-000"])
	require.Equal(t, Keep, a["b-000"], "a group with fewer than minSuccessful keeps all")
	require.Equal(t, Keep, a["b-001"])
}

func TestMaxDeletesPerRunDeletesTheOldestAndPostponesTheRest(t *testing.T) {
	bs := nightly("n", 20, PhaseCompleted)
	lr, err := ParseLabelRule("never=matches")
	require.NoError(t, err)
	p := policy(Rules{Labels: []LabelRule{lr}}) // would delete everything
	p.MaxDeletesPerRun = 4
	plan := Evaluate(p, bs, day0.AddDate(1, 0, 0))
	require.Equal(t, 4, plan.Deletes())
	a := actions(plan)
	for i := range 20 {
		want := Keep
		if i < 4 {
			want = Delete
		}
		require.Equal(t, want, a[bs[i].Name], bs[i].Name)
	}
	require.Contains(t, reasons(plan, "n-019"), "postponed: maxDeletesPerRun 4 reached")
	require.Len(t, plan.Warnings, 1)
}

func TestFailedBackupsAreDeletedAfterFailedRetentionAndNotCounted(t *testing.T) {
	bs := nightly("n", 10, PhaseCompleted)
	now := bs[9].Created.Add(time.Hour)
	bs[9].Phase = PhaseFailed           // 1h old
	bs[1].Phase = PhaseFailed           // 8 days old
	bs[8].Phase = PhaseFailedValidation // 1 day old
	plan := Evaluate(policy(Rules{Last: 2}), bs, now)
	a := actions(plan)
	require.Equal(t, Keep, a["n-009"])
	require.Equal(t, Keep, a["n-008"])
	require.Equal(t, Delete, a["n-001"])
	require.Equal(t, Keep, a["n-007"], "keepLast counts only Completed and PartiallyFailed")
	require.Equal(t, Keep, a["n-006"])
	require.Equal(t, Delete, a["n-005"])

	p := policy(Rules{Last: 2})
	p.CountPhases = []string{PhaseCompleted, PhasePartiallyFailed, PhaseFailed}
	a = actions(Evaluate(p, bs, now))
	require.Equal(t, Keep, a["n-009"])
	require.Equal(t, Keep, a["n-007"])
	require.Equal(t, Delete, a["n-006"], "a counted Failed backup takes a keepLast slot")
}

func TestABackupIsDeletedOnlyIfEveryPolicySelectingItSaysDelete(t *testing.T) {
	bs := nightly("n", 10, PhaseCompleted)
	bs[2].Labels["tier"] = "gold"
	short := policy(Rules{Last: 2})
	short.Name = "short"
	gold := policy(Rules{Last: 1})
	gold.Name = "gold"
	gold.Selector = labels.SelectorFromSet(labels.Set{"tier": "gold"})
	now := day0.AddDate(1, 0, 0)
	plans := []*Plan{Evaluate(short, bs, now), Evaluate(gold, bs, now)}
	Combine(plans)
	a := actions(plans[0])
	require.Equal(t, Keep, a["n-002"])
	require.Contains(t, reasons(plans[0], "n-002"), "kept by RetentionPolicy gold")
	require.Equal(t, Delete, a["n-003"], "selected by one policy only, which deletes it")
	require.Len(t, plans[1].Items, 1)
}

func TestBackupsWithoutTheGroupLabelFormTheirOwnGroup(t *testing.T) {
	bs := nightly("n", 3, PhaseCompleted)
	bs = append(bs, Backup{Name: "manual-1", Created: day0, Phase: PhaseCompleted}, Backup{Name: "manual-2", Created: day0.Add(time.Hour), Phase: PhaseCompleted})
	plan := Evaluate(policy(Rules{Last: 1}), bs, day0.AddDate(1, 0, 0))
	a := actions(plan)
	require.Equal(t, Keep, a["n-002"])
	require.Equal(t, Keep, a["manual-2"])
	require.Equal(t, Delete, a["manual-1"])
	for _, it := range plan.Items {
		if it.Backup == "manual-1" {
			require.Equal(t, "!"+DefaultGroupBy, it.Group)
		}
	}
}

func TestAnEmptySelectionIsAWarning(t *testing.T) {
	p := policy(Rules{Last: 1})
	p.Selector = labels.SelectorFromSet(labels.Set{"x": "y"})
	plan := Evaluate(p, nightly("n", 3, PhaseCompleted), day0)
	require.Empty(t, plan.Items)
	require.Equal(t, []string{`RetentionPolicy p: selector "x=y" matches no backup`}, plan.Warnings)
}

func TestWeeklyBucketsAreISOWeeksAcrossTheYearEnd(t *testing.T) {
	// 2026 has an ISO week 53: Monday 28 Dec 2026 to Sunday 3 Jan 2027.
	// 2020's week 53 ends on Sunday 3 Jan 2021.
	var bs []Backup
	for i, d := range []string{"2020-12-27", "2020-12-28", "2021-01-03", "2021-01-04", "2026-12-27", "2026-12-28", "2027-01-01", "2027-01-03", "2027-01-04"} {
		tm, _ := time.Parse("2006-01-02", d)
		bs = append(bs, Backup{Name: fmt.Sprintf("b%d-%s", i, d), Created: tm.Add(12 * time.Hour), Phase: PhaseCompleted})
	}
	p := policy(Rules{Weekly: Unlimited})
	plan := Evaluate(p, bs, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a := actions(plan)
	want := map[string]Action{
		"b0-2020-12-27": Keep, "b1-2020-12-28": Delete, "b2-2021-01-03": Keep, "b3-2021-01-04": Keep,
		"b4-2026-12-27": Keep, "b5-2026-12-28": Delete, "b6-2027-01-01": Delete, "b7-2027-01-03": Keep, "b8-2027-01-04": Keep,
	}
	require.Equal(t, want, a)
}

func TestCalendarBucketsAreComputedInThePolicysTimeZone(t *testing.T) {
	// 23:30 UTC on 28 Mar 2026 is 00:30 on 29 Mar in Berlin; 22:30 UTC on
	// 29 Mar is 00:30 on 30 Mar (summer time began in between).
	bs := []Backup{
		{Name: "a", Created: time.Date(2026, 3, 28, 22, 30, 0, 0, time.UTC), Phase: PhaseCompleted},
		{Name: "b", Created: time.Date(2026, 3, 28, 23, 30, 0, 0, time.UTC), Phase: PhaseCompleted},
		{Name: "c", Created: time.Date(2026, 3, 29, 21, 30, 0, 0, time.UTC), Phase: PhaseCompleted},
		{Name: "d", Created: time.Date(2026, 3, 29, 22, 30, 0, 0, time.UTC), Phase: PhaseCompleted},
	}
	now := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	p := policy(Rules{Daily: 2})
	require.Equal(t, map[string]Action{"a": Delete, "b": Keep, "c": Delete, "d": Keep}, actions(Evaluate(p, bs, now)), "UTC: a and b are the 28th, c and d the 29th")
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	p.TimeZone = berlin
	require.Equal(t, map[string]Action{"a": Delete, "b": Delete, "c": Keep, "d": Keep}, actions(Evaluate(p, bs, now)), "Berlin: b and c are the 29th, d the 30th")
	p.Rules = Rules{Daily: 3}
	require.Equal(t, map[string]Action{"a": Keep, "b": Delete, "c": Keep, "d": Keep}, actions(Evaluate(p, bs, now)), "Berlin: a is the 28th, b and c the 29th, d the 30th")
	p.TimeZone = nil
	require.Equal(t, map[string]Action{"a": Keep, "b": Keep, "c": Delete, "d": Keep}, actions(Evaluate(p, bs, now)), "UTC: two days only, so keepDaily keeps the oldest too")
}

func TestParseDurationRefusesWhatRestricWouldMisread(t *testing.T) {
	for _, s := range []string{"", "7", "d", "-1d", "1w", "1d1d", "1.5d", "200000y"} {
		_, err := ParseDuration(s)
		require.Error(t, err, s)
	}
	d, err := ParseDuration("1y2m3d4h")
	require.NoError(t, err)
	require.Equal(t, Duration{1, 2, 3, 4}, d)
	require.Equal(t, "1y2m3d4h", d.String())
}
