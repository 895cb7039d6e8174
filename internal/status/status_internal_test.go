package status

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRate: a deletion's rate is over the time since the previous summary
// when that one saw it, else its average since it began; never negative.
func TestRate(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	started, checkpoint := t0.Add(-10*time.Second), t0.Add(2*time.Second)
	d := Deletion{UID: "u", Watermark: 300, StartedAt: &started, UpdatedAt: &checkpoint}
	prev := &Summary{Time: t0, Deletions: []Deletion{{UID: "u", Watermark: 100}}}
	require.InDelta(t, 100.0, rate(d, prev.Deletions[0], prev, t0.Add(2*time.Second)), 1e-9, "200 items in 2s")
	require.InDelta(t, 25.0, rate(d, Deletion{}, nil, t0.Add(2*time.Second)), 1e-9, "300 items in the 12s since it began")
	require.InDelta(t, 25.0, rate(d, Deletion{}, prev, t0.Add(2*time.Second)), 1e-9, "the previous summary did not see it")
	require.Zero(t, rate(Deletion{UID: "u", Watermark: 50}, prev.Deletions[0], prev, t0.Add(time.Second)), "a watermark that went back")
	require.Zero(t, rate(Deletion{UID: "u"}, Deletion{}, nil, t0), "no checkpoint yet")
}
