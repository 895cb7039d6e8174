package retention

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"
)

// modelForget is restic's forget written a second time, straight from its
// documentation (doc/060_forget.rst) rather than from its code, for the
// property test against Forget:
//
//   - keepLast n: the n newest backups;
//   - keepHourly/Daily/Weekly/Monthly/Yearly n: "for the last n hours/days/
//     ... which have one or more snapshots, keep only the most recent one"
//     (weeks are ISO weeks, Monday to Sunday); -1 is unlimited;
//   - "if there are not enough snapshots to keep one for each" (fewer
//     buckets than n), "the oldest snapshot is kept additionally";
//   - keepWithin d: every backup within d of the newest one (newest: not
//     in the future); keepWithinX d: the most recent one of each X among
//     those, and the oldest of the group if it is within d;
//   - keepLabels: every backup a selector matches.
//
// Buckets are computed by formatting the wall-clock time in loc, and the
// ISO week by hand, so that the model shares no bucket code with Forget.
func modelForget(list []Entry, r Rules, loc *time.Location, now time.Time) map[string][]string {
	sorted := slices.Clone(list)
	slices.SortStableFunc(sorted, func(a, b Entry) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	reasons := map[string][]string{}
	if len(sorted) == 0 {
		return reasons
	}
	oldest := sorted[len(sorted)-1].Name
	var newest time.Time
	for _, e := range sorted {
		if e.Created.Before(now) && e.Created.After(newest) {
			newest = e.Created
		}
	}
	newest = newest.In(loc)
	add := func(name, why string) { reasons[name] = append(reasons[name], why) }

	for _, e := range sorted {
		for _, l := range r.Labels {
			if l.Selector.Matches(labels.Set(e.Labels)) {
				add(e.Name, "keepLabels "+l.Text)
			}
		}
		if !r.Within.Zero() && e.Created.After(newest.AddDate(-r.Within.Years, -r.Within.Months, -r.Within.Days).Add(-time.Duration(r.Within.Hours)*time.Hour)) {
			add(e.Name, "keepWithin "+r.Within.String())
		}
	}
	isoWeek := func(t time.Time) string {
		wd := int(t.Weekday()+6)%7 + 1 // Monday 1 .. Sunday 7
		thu := time.Date(t.Year(), t.Month(), t.Day()+4-wd, 12, 0, 0, 0, time.UTC)
		return fmt.Sprintf("%d-W%02d", thu.Year(), (thu.YearDay()-1)/7+1)
	}
	formats := []func(time.Time) string{
		nil, // keepLast: each backup alone
		func(t time.Time) string { return t.Format("2006-01-02T15") },
		func(t time.Time) string { return t.Format("2006-01-02") },
		isoWeek,
		func(t time.Time) string { return t.Format("2006-01") },
		func(t time.Time) string { return t.Format("2006") },
	}
	// bucketsOf returns the buckets of es in order, newest first, each
	// with its most recent backup.
	bucketsOf := func(es []Entry, f func(time.Time) string) (newestOf []string) {
		seen := map[string]bool{}
		for _, e := range es {
			k := e.Name
			if f != nil {
				k = f(e.Created.In(loc))
			}
			if !seen[k] {
				seen[k] = true
				newestOf = append(newestOf, e.Name)
			}
		}
		return newestOf
	}
	counts := []int{r.Last, r.Hourly, r.Daily, r.Weekly, r.Monthly, r.Yearly}
	names := []string{"keepLast", "keepHourly", "keepDaily", "keepWeekly", "keepMonthly", "keepYearly"}
	keptBy := make([]map[string]string, 6)
	for i, n := range counts {
		keptBy[i] = map[string]string{}
		if n == 0 {
			continue
		}
		bs := bucketsOf(sorted, formats[i])
		take := len(bs)
		if n > 0 && n < take {
			take = n
		}
		for _, name := range bs[:take] {
			keptBy[i][name] = names[i]
		}
		if (n == Unlimited || len(bs) < n) && keptBy[i][oldest] == "" {
			keptBy[i][oldest] = names[i] + " (oldest)"
		}
	}
	withins := []Duration{r.WithinHourly, r.WithinDaily, r.WithinWeekly, r.WithinMonthly, r.WithinYearly}
	wnames := []string{"keepWithinHourly", "keepWithinDaily", "keepWithinWeekly", "keepWithinMonthly", "keepWithinYearly"}
	wKeptBy := make([]map[string]string, 5)
	for i, d := range withins {
		wKeptBy[i] = map[string]string{}
		if d.Zero() {
			continue
		}
		since := newest.AddDate(-d.Years, -d.Months, -d.Days).Add(-time.Duration(d.Hours) * time.Hour)
		var in []Entry
		for _, e := range sorted {
			if e.Created.After(since) {
				in = append(in, e)
			}
		}
		for _, name := range bucketsOf(in, formats[i+1]) {
			wKeptBy[i][name] = wnames[i] + " " + d.String()
		}
		if len(in) > 0 && in[len(in)-1].Name == oldest && wKeptBy[i][oldest] == "" {
			wKeptBy[i][oldest] = wnames[i] + " " + d.String() + " (oldest)"
		}
	}
	for _, e := range sorted {
		for i := range keptBy {
			if why := keptBy[i][e.Name]; why != "" {
				add(e.Name, why)
			}
		}
		for i := range wKeptBy {
			if why := wKeptBy[i][e.Name]; why != "" {
				add(e.Name, why)
			}
		}
	}
	return reasons
}

var propertyZones = []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "UTC"}

// interesting instants: DST changes, year ends, and years whose ISO year
// has a week 53 (2015, 2020, 2026).
var propertyStarts = []string{
	"2026-03-27T12:00:00Z", "2026-10-23T12:00:00Z", "2026-12-20T00:00:00Z", "2020-12-24T00:00:00Z",
	"2015-12-25T00:00:00Z", "2021-03-10T00:00:00Z", "2024-02-27T00:00:00Z", "2023-12-29T20:00:00Z",
}

func randomHistory(rng *rand.Rand) []Backup {
	start, _ := time.Parse(time.RFC3339, propertyStarts[rng.IntN(len(propertyStarts))])
	n := rng.IntN(60)
	var out []Backup
	t := start
	for i := range n {
		// Gaps from nothing (same instant) to weeks, mostly around an hour
		// or a day, so that buckets both share and skip.
		switch rng.IntN(6) {
		case 0:
		case 1:
			t = t.Add(time.Duration(rng.IntN(90)) * time.Minute)
		case 2:
			t = t.Add(time.Duration(rng.IntN(30)) * time.Hour)
		case 3:
			t = t.Add(24 * time.Hour)
		case 4:
			t = t.Add(time.Duration(rng.IntN(400)) * time.Hour)
		default:
			t = t.Add(time.Duration(rng.IntN(24*60)) * time.Minute)
		}
		lbls := map[string]string{}
		switch rng.IntN(4) {
		case 0, 1:
			lbls[DefaultGroupBy] = "nightly"
		case 2:
			lbls[DefaultGroupBy] = "weekly"
		}
		if rng.IntN(5) == 0 {
			lbls["tier"] = "gold"
		}
		out = append(out, Backup{Name: fmt.Sprintf("b-%03d", i), Created: t, Phase: PhaseCompleted, Labels: lbls})
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func randomRules(rng *rand.Rand) Rules {
	count := func() int { return []int{0, 0, 0, 1, 2, 3, 5, 8, Unlimited}[rng.IntN(9)] }
	dur := func() Duration {
		if rng.IntN(3) > 0 {
			return Duration{}
		}
		return Duration{Years: rng.IntN(2) * rng.IntN(2), Months: rng.IntN(3) * rng.IntN(2), Days: rng.IntN(10), Hours: rng.IntN(30)}
	}
	r := Rules{Last: count(), Hourly: count(), Daily: count(), Weekly: count(), Monthly: count(), Yearly: count(),
		Within: dur(), WithinHourly: dur(), WithinDaily: dur(), WithinWeekly: dur(), WithinMonthly: dur(), WithinYearly: dur()}
	if rng.IntN(4) == 0 {
		lr, _ := ParseLabelRule("tier=gold")
		r.Labels = append(r.Labels, lr)
	}
	return r
}

// TestForgetAgreesWithTheDocumentedModelOnRandomHistories drives the
// engine and the model with random histories (several groups, random
// gaps, DST changes and year ends in zones with odd offsets, ISO week 53)
// and random rules: every backup must get the same decision and the same
// reasons.
func TestForgetAgreesWithTheDocumentedModelOnRandomHistories(t *testing.T) {
	const runs = 3000
	for run := range runs {
		seed := uint64(run)
		rng := rand.New(rand.NewPCG(seed, 42))
		zone := propertyZones[rng.IntN(len(propertyZones))]
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		bs := randomHistory(rng)
		p := &Policy{Name: "p", GroupBy: []string{DefaultGroupBy}, Rules: randomRules(rng), TimeZone: loc,
			CountPhases: DefaultCountPhases(), FailedRetention: DefaultFailedRetention}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		if len(bs) > 0 && rng.IntN(4) == 0 {
			// Some backups in the future: they do not count as the newest.
			now = bs[rng.IntN(len(bs))].Created
		}
		plan := Evaluate(p, bs, now)
		require.Len(t, plan.Items, len(bs))

		groups := map[string][]Entry{}
		for _, b := range bs {
			groups[p.Group(&b)] = append(groups[p.Group(&b)], Entry{Name: b.Name, Created: b.Created, Labels: b.Labels})
		}
		want := map[string][]string{}
		for _, es := range groups {
			maps.Copy(want, modelForget(es, p.Rules, loc, now))
		}
		for _, it := range plan.Items {
			ctx := fmt.Sprintf("seed %d, zone %s, rules {%s}, now %s, backup %s (%s) in group %q", seed, zone, p.Rules, now, it.Backup, it.Created.In(loc), it.Group)
			if w, ok := want[it.Backup]; ok {
				require.Equal(t, Keep, it.Action, ctx)
				require.Equal(t, w, it.Reasons, ctx)
			} else {
				require.Equal(t, Delete, it.Action, ctx)
			}
		}
	}
}
