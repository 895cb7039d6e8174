package retention

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// resticCases is testdata/restic_forget.json: restic's own TestApplyPolicy
// inputs and expected outputs (see its _source field for attribution).
type resticCases struct {
	Snapshots []struct {
		Time  string   `json:"time"`
		Tags  []string `json:"tags"`
		Paths []string `json:"paths"`
	} `json:"snapshots"`
	Cases []struct {
		Policy map[string]json.RawMessage `json:"policy"`
		Keep   []struct {
			Time    time.Time `json:"time"`
			Tags    []string  `json:"tags"`
			Paths   []string  `json:"paths"`
			Matches []string  `json:"matches"`
		} `json:"keep"`
	} `json:"cases"`
}

// resticRules turns one of restic's ExpirePolicy literals (as JSON) into
// Rules; a tag list becomes a selector requiring each tag as a label key.
func resticRules(t *testing.T, p map[string]json.RawMessage) Rules {
	var r Rules
	counts := map[string]*int{"last": &r.Last, "hourly": &r.Hourly, "daily": &r.Daily, "weekly": &r.Weekly, "monthly": &r.Monthly, "yearly": &r.Yearly}
	durs := map[string]*Duration{"within": &r.Within, "withinHourly": &r.WithinHourly, "withinDaily": &r.WithinDaily,
		"withinWeekly": &r.WithinWeekly, "withinMonthly": &r.WithinMonthly, "withinYearly": &r.WithinYearly}
	for k, raw := range p {
		switch {
		case counts[k] != nil:
			require.NoError(t, json.Unmarshal(raw, counts[k]))
		case durs[k] != nil:
			var s string
			require.NoError(t, json.Unmarshal(raw, &s))
			d, err := ParseDuration(s)
			require.NoError(t, err)
			*durs[k] = d
		case k == "tags":
			var lists [][]string
			require.NoError(t, json.Unmarshal(raw, &lists))
			for _, l := range lists {
				lr, err := ParseLabelRule(strings.Join(l, ","))
				require.NoError(t, err)
				r.Labels = append(r.Labels, lr)
			}
		default:
			t.Fatalf("unknown policy field %q", k)
		}
	}
	return r
}

// resticReason maps restic's keep reasons to Lethe's names for the same
// rules ("oldest daily snapshot" is "keepDaily (oldest)").
func resticReason(m string) string {
	buckets := map[string]string{"last": "keepLast", "hourly": "keepHourly", "daily": "keepDaily", "weekly": "keepWeekly", "monthly": "keepMonthly", "yearly": "keepYearly"}
	if g := regexp.MustCompile(`^(oldest )?(\w+) snapshot$`).FindStringSubmatch(m); g != nil {
		s := buckets[g[2]]
		if g[1] != "" {
			s += " (oldest)"
		}
		return s
	}
	if g := regexp.MustCompile(`^(oldest )?(\w+) within (\S+)$`).FindStringSubmatch(m); g != nil {
		s := "keepWithin" + strings.ToUpper(g[2][:1]) + g[2][1:] + " " + g[3]
		if g[1] != "" {
			s += " (oldest)"
		}
		return s
	}
	if g := regexp.MustCompile(`^within (\S+)$`).FindStringSubmatch(m); g != nil {
		return "keepWithin " + g[1]
	}
	if g := regexp.MustCompile(`^has tags \[(.*)\]$`).FindStringSubmatch(m); g != nil {
		return "keepLabels " + strings.Join(strings.Split(g[1], ", "), ",")
	}
	return "unmapped restic reason: " + m
}

// TestForgetKeepsWhatResticKeepsOnResticsOwnCases runs restic's 40
// TestApplyPolicy cases through Forget: the same snapshots must be kept,
// in the same order, for the same reasons.
func TestForgetKeepsWhatResticKeepsOnResticsOwnCases(t *testing.T) {
	raw, err := os.ReadFile("testdata/restic_forget.json")
	require.NoError(t, err)
	var rc resticCases
	require.NoError(t, json.Unmarshal(raw, &rc))
	require.Len(t, rc.Snapshots, 103)
	require.Len(t, rc.Cases, 40)

	type snap struct {
		t     time.Time
		tags  string
		paths string
	}
	byName := map[string]snap{}
	var entries []Entry
	for i, s := range rc.Snapshots {
		tm, err := time.Parse("2006-01-02 15:04:05", s.Time)
		require.NoError(t, err)
		// restic sorts stably: snapshots taken at one instant keep their
		// input order, which names in input order reproduce.
		name := fmt.Sprintf("s%03d", i)
		lbls := map[string]string{}
		for _, tag := range s.Tags {
			lbls[tag] = ""
		}
		entries = append(entries, Entry{Name: name, Created: tm, Labels: lbls})
		byName[name] = snap{tm, strings.Join(s.Tags, ","), strings.Join(s.Paths, ",")}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, c := range rc.Cases {
		t.Run(fmt.Sprintf("policy_keep_snapshots_%d", i), func(t *testing.T) {
			r := resticRules(t, c.Policy)
			var got, want []string
			for _, v := range Forget(entries, r, time.UTC, now) {
				if v.Keep {
					s := byName[v.Entry.Name]
					got = append(got, fmt.Sprintf("%s tags=%s paths=%s %q", s.t.Format(time.RFC3339Nano), s.tags, s.paths, v.Reasons))
				} else {
					require.Empty(t, v.Reasons)
				}
			}
			for _, k := range c.Keep {
				var reasons []string
				for _, m := range k.Matches {
					reasons = append(reasons, resticReason(m))
				}
				want = append(want, fmt.Sprintf("%s tags=%s paths=%s %q", k.Time.Format(time.RFC3339Nano), strings.Join(k.Tags, ","), strings.Join(k.Paths, ","), reasons))
			}
			require.Equal(t, want, got)
		})
	}
}
