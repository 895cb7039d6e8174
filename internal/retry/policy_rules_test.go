package retry_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/retry"
)

// TestAPluginsScheduleOverridesOnlyWhatItSets: a plugin's override
// takes the fields it sets, jitter included, and the default's for the
// others.
func TestAPluginsScheduleOverridesOnlyWhatItSets(t *testing.T) {
	p := retry.Policy{Default: retry.DefaultBackoff(), Plugins: map[string]retry.Backoff{
		"example.com/a": {Jitter: 0.25},
		"example.com/b": {Base: time.Minute},
	}}
	a, b := p.For("example.com/a"), p.For("example.com/b")
	require.InDelta(t, 0.25, a.Jitter, 0)
	require.Equal(t, retry.BaseDefault, a.Base)
	require.InDelta(t, retry.JitterDefault, b.Jitter, 0, "an override without jitter keeps the default's")
	require.Equal(t, time.Minute, b.Base)
}

// TestABadScheduleIsRefusedWhetherDefaultOrAPlugins: the queue refuses a
// policy whose default, or any plugin's schedule, is not valid.
func TestABadScheduleIsRefusedWhetherDefaultOrAPlugins(t *testing.T) {
	f := newFixture(t, "sqlite")
	bad := retry.DefaultBackoff()
	bad.MaxAttempts = 0
	_, err := retry.New(&retry.Config{Store: f.st, Policy: retry.Policy{Default: bad}})
	require.ErrorContains(t, err, "max attempts")
	_, err = retry.New(&retry.Config{Store: f.st, Policy: retry.Policy{Default: retry.DefaultBackoff(),
		Plugins: map[string]retry.Backoff{"example.com/a": {Jitter: 1}}}})
	require.ErrorContains(t, err, "jitter of example.com/a")
	_, err = retry.New(&retry.Config{Store: f.st, Policy: retry.Policy{Default: retry.DefaultBackoff()}})
	require.NoError(t, err)
}

// TestTheBaseDelayIsPositiveAndAtMostTheCap: --retry-backoff takes a
// base delay up to CapDefault and refuses zero, a negative delay and
// anything longer than the cap.
func TestTheBaseDelayIsPositiveAndAtMostTheCap(t *testing.T) {
	p, err := retry.ParsePolicy([]string{retry.CapDefault.String()}, nil)
	require.NoError(t, err)
	require.Equal(t, retry.CapDefault, p.Default.Base)
	for _, v := range []string{"0s", "-1s", (retry.CapDefault + time.Second).String()} {
		_, err := retry.ParsePolicy([]string{v}, nil)
		require.Error(t, err, v)
	}
}
