package retention

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a calendar duration in restic's form (2y5m7d3h): years,
// months, days and hours, each subtracted with the calendar of the
// policy's time zone (time.AddDate), as restic's --keep-within does.
type Duration struct {
	Years, Months, Days, Hours int
}

// Zero reports whether every part is zero (the rule is off).
func (d Duration) Zero() bool { return d == Duration{} }

// String is the duration as restic prints it: 1y2m3d4h, zero parts left
// out, in that order.
func (d Duration) String() string {
	var b strings.Builder
	for _, p := range []struct {
		n    int
		unit string
	}{{d.Years, "y"}, {d.Months, "m"}, {d.Days, "d"}, {d.Hours, "h"}} {
		if p.n != 0 {
			fmt.Fprintf(&b, "%d%s", p.n, p.unit)
		}
	}
	return b.String()
}

// before is the instant d before t, computed in t's location.
func (d Duration) before(t time.Time) time.Time {
	return t.AddDate(-d.Years, -d.Months, -d.Days).Add(-time.Duration(d.Hours) * time.Hour)
}

// maxDurationPart bounds each part so that AddDate cannot overflow.
const maxDurationPart = 100000

// ParseDuration reads a calendar duration: one or more of <n>y, <n>m,
// <n>d, <n>h (non-negative integers, each unit at most once, in any
// order), e.g. 7d, 1y6m, 36h. Unlike restic, a negative part, a repeated
// unit and an empty string are errors.
func ParseDuration(in string) (Duration, error) {
	s := strings.TrimSpace(in)
	bad := func(why string) (Duration, error) {
		return Duration{}, fmt.Errorf("invalid calendar duration %q: %s (examples: 7d, 36h, 1y6m, 2y5m7d3h)", in, why)
	}
	if s == "" {
		return bad("empty")
	}
	var d Duration
	seen := map[byte]bool{}
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 {
			return bad("want a number before each unit")
		}
		if i == len(s) {
			return bad("a number without a unit (y, m, d or h)")
		}
		n, err := strconv.Atoi(s[:i])
		if err != nil || n > maxDurationPart {
			return bad(fmt.Sprintf("each part at most %d", maxDurationPart))
		}
		u := s[i]
		if seen[u] {
			return bad(fmt.Sprintf("unit %q twice", u))
		}
		seen[u] = true
		switch u {
		case 'y':
			d.Years = n
		case 'm':
			d.Months = n
		case 'd':
			d.Days = n
		case 'h':
			d.Hours = n
		default:
			return bad(fmt.Sprintf("unknown unit %q: use y, m, d or h", u))
		}
		s = s[i+1:]
	}
	return d, nil
}
