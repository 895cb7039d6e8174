package retention

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Unlimited is the count that keeps every bucket (restic's "unlimited").
const Unlimited = -1

// Rules are restic's keep rules. A count of 0 turns a rule off and
// Unlimited (-1) keeps one backup in every bucket; a zero Duration turns a
// within rule off. A backup is kept when any rule keeps it.
type Rules struct {
	Last, Hourly, Daily, Weekly, Monthly, Yearly int

	// Within keeps every backup newer than Within before the newest
	// backup of the group; the WithinX rules keep the newest backup of
	// each X bucket in that window.
	Within, WithinHourly, WithinDaily, WithinWeekly, WithinMonthly, WithinYearly Duration

	// Labels keeps every backup that one of the selectors matches
	// (restic's --keep-tag: each selector is one tag list).
	Labels []LabelRule
}

// LabelRule is one keepLabels selector, with its text as written.
type LabelRule struct {
	Text     string
	Selector labels.Selector
}

// ParseLabelRule parses a label selector in Kubernetes syntax (as -l
// takes it) for keepLabels.
func ParseLabelRule(s string) (LabelRule, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return LabelRule{}, err
	}
	if sel.Empty() {
		return LabelRule{}, fmt.Errorf("empty selector: it would keep every backup")
	}
	return LabelRule{Text: s, Selector: sel}, nil
}

// Empty reports whether no rule is set: such rules keep nothing.
func (r Rules) Empty() bool {
	return r.Last == 0 && r.Hourly == 0 && r.Daily == 0 && r.Weekly == 0 && r.Monthly == 0 && r.Yearly == 0 &&
		r.Within.Zero() && r.WithinHourly.Zero() && r.WithinDaily.Zero() && r.WithinWeekly.Zero() &&
		r.WithinMonthly.Zero() && r.WithinYearly.Zero() && len(r.Labels) == 0
}

// Entry is one backup of a group, as the rules see it.
type Entry struct {
	Name    string
	Created time.Time
	Labels  map[string]string
}

// Verdict is the rules' decision for one entry: kept, with the rules that
// kept it in restic's order (labels, within, the counted buckets, the
// within buckets), or not.
type Verdict struct {
	Entry   Entry
	Keep    bool
	Reasons []string
}

// A bucket function maps a time (in the policy's zone) to the integer of
// its calendar bucket, as restic's ymdh, ymd, yw, ym and y do. Keys only
// grow with time in any one zone, so a bucket's backups are adjacent in a
// newest-first list.
func hourKey(t time.Time) int {
	return t.Year()*1000000 + int(t.Month())*10000 + t.Day()*100 + t.Hour()
}
func dayKey(t time.Time) int   { return t.Year()*10000 + int(t.Month())*100 + t.Day() }
func monthKey(t time.Time) int { return t.Year()*100 + int(t.Month()) }
func yearKey(t time.Time) int  { return t.Year() }

// weekKey is the ISO 8601 week: weeks start on Monday, and week 1 is the
// one holding the year's first Thursday (so 31 Dec may be in week 1 of
// the next year, and 1 Jan in week 52 or 53 of the previous one).
func weekKey(t time.Time) int {
	y, w := t.ISOWeek()
	return y*100 + w
}

// SortNewestFirst orders entries newest first; entries created at the
// same instant keep their names' order, so that a plan never depends on
// the order the catalog listed them in.
func SortNewestFirst(list []Entry) {
	slices.SortStableFunc(list, func(a, b Entry) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// latest is the newest creation time that is not in the future, as
// restic's findLatestTimestamp; the zero time when every entry is in
// the future (then every within rule reaches back to the beginning).
func latest(list []Entry, now time.Time) time.Time {
	var l time.Time
	for _, e := range list {
		if e.Created.After(l) && e.Created.Before(now) {
			l = e.Created
		}
	}
	return l
}

// Forget applies r to one group, as restic's forget applies its policy
// (internal/data/snapshot_policy.go, ApplyPolicy), and returns a verdict
// per entry, newest first. Calendar buckets and within windows are
// computed in loc; now only bounds which backup counts as the newest
// (one created in the future does not).
//
// Walking newest first, a bucket rule keeps an entry whose bucket differs
// from the last bucket it kept, while it has counts left; it also keeps
// the oldest entry if it still has counts left when it reaches it
// ("oldest"). A within-bucket rule does the same for the entries inside
// its window, without a count.
func Forget(list []Entry, r Rules, loc *time.Location, now time.Time) []Verdict {
	sorted := slices.Clone(list)
	SortNewestFirst(sorted)
	out := make([]Verdict, len(sorted))
	if len(sorted) == 0 {
		return out
	}
	type bucket struct {
		name  string
		count int
		key   func(time.Time) int
		last  int
		seen  bool
	}
	buckets := []*bucket{
		{name: "keepLast", count: r.Last},
		{name: "keepHourly", count: r.Hourly, key: hourKey},
		{name: "keepDaily", count: r.Daily, key: dayKey},
		{name: "keepWeekly", count: r.Weekly, key: weekKey},
		{name: "keepMonthly", count: r.Monthly, key: monthKey},
		{name: "keepYearly", count: r.Yearly, key: yearKey},
	}
	type withinBucket struct {
		name  string
		d     Duration
		key   func(time.Time) int
		last  int
		seen  bool
		since time.Time
	}
	within := []*withinBucket{
		{name: "keepWithinHourly", d: r.WithinHourly, key: hourKey},
		{name: "keepWithinDaily", d: r.WithinDaily, key: dayKey},
		{name: "keepWithinWeekly", d: r.WithinWeekly, key: weekKey},
		{name: "keepWithinMonthly", d: r.WithinMonthly, key: monthKey},
		{name: "keepWithinYearly", d: r.WithinYearly, key: yearKey},
	}
	newest := latest(sorted, now).In(loc)
	for _, w := range within {
		w.since = w.d.before(newest)
	}
	withinSince := r.Within.before(newest)
	oldest := len(sorted) - 1
	for i, e := range sorted {
		v := Verdict{Entry: e}
		t := e.Created.In(loc)
		set := labels.Set(e.Labels)
		for _, l := range r.Labels {
			if l.Selector.Matches(set) {
				v.Reasons = append(v.Reasons, "keepLabels "+l.Text)
			}
		}
		if !r.Within.Zero() && t.After(withinSince) {
			v.Reasons = append(v.Reasons, "keepWithin "+r.Within.String())
		}
		for _, b := range buckets {
			if b.count == 0 || b.count < Unlimited {
				continue
			}
			k := i // keepLast: every entry is a bucket of its own
			if b.key != nil {
				k = b.key(t)
			}
			same := b.seen && k == b.last
			if same && i != oldest {
				continue
			}
			reason := b.name
			if same {
				reason += " (oldest)"
			}
			b.last, b.seen = k, true
			if b.count > 0 {
				b.count--
			}
			v.Reasons = append(v.Reasons, reason)
		}
		for _, w := range within {
			if w.d.Zero() || !t.After(w.since) {
				continue
			}
			k := w.key(t)
			same := w.seen && k == w.last
			if same && i != oldest {
				continue
			}
			reason := w.name + " " + w.d.String()
			if same {
				reason += " (oldest)"
			}
			w.last, w.seen = k, true
			v.Reasons = append(v.Reasons, reason)
		}
		v.Keep = len(v.Reasons) > 0
		out[i] = v
	}
	return out
}

// String describes r in one line, for messages.
func (r Rules) String() string {
	s := ""
	add := func(f string, args ...any) {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf(f, args...)
	}
	for _, c := range []struct {
		n    int
		name string
	}{{r.Last, "keepLast"}, {r.Hourly, "keepHourly"}, {r.Daily, "keepDaily"}, {r.Weekly, "keepWeekly"}, {r.Monthly, "keepMonthly"}, {r.Yearly, "keepYearly"}} {
		if c.n != 0 {
			add("%s %d", c.name, c.n)
		}
	}
	for _, c := range []struct {
		d    Duration
		name string
	}{{r.Within, "keepWithin"}, {r.WithinHourly, "keepWithinHourly"}, {r.WithinDaily, "keepWithinDaily"}, {r.WithinWeekly, "keepWithinWeekly"}, {r.WithinMonthly, "keepWithinMonthly"}, {r.WithinYearly, "keepWithinYearly"}} {
		if !c.d.Zero() {
			add("%s %s", c.name, c.d)
		}
	}
	for _, l := range r.Labels {
		add("keepLabels %s", l.Text)
	}
	return s
}
