package retry_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/retry"
)

// TestBackoffSchedule: the documented schedule, Base·n⁴ capped, then
// jitter within ±Jitter, never earlier than the plugin's retryAfter.
func TestBackoffSchedule(t *testing.T) {
	b := retry.DefaultBackoff()
	want := []time.Duration{
		30 * time.Second,                              // 1
		8 * time.Minute,                               // 2: 30s·16
		40*time.Minute + 30*time.Second,               // 3: 30s·81
		2*time.Hour + 8*time.Minute,                   // 4: 30s·256
		5*time.Hour + 12*time.Minute + 30*time.Second, // 5: 30s·625
		10*time.Hour + 48*time.Minute,                 // 6: 30s·1296
		20*time.Hour + 30*time.Second,                 // 7: 30s·2401
		24 * time.Hour,                                // 8: capped (30s·4096 = 34h8m)
		24 * time.Hour,                                // 9
	}
	for i, w := range want {
		assert.Equal(t, w, b.Delay(i+1), "attempt %d", i+1)
	}
	assert.Equal(t, b.Delay(1), b.Delay(0), "attempt 0 counts as the first")

	r := rand.New(rand.NewPCG(7, 7))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for n := 1; n <= 12; n++ {
		for range 50 {
			d := b.Next(now, n, 0, r).Sub(now)
			lo, hi := time.Duration(float64(b.Delay(n))*0.9), time.Duration(float64(b.Delay(n))*1.1)
			require.True(t, d >= lo && d <= hi, "attempt %d: %s outside [%s, %s]", n, d, lo, hi)
		}
	}
	// The plugin's retryAfter wins when it is later; never earlier.
	assert.Equal(t, now.Add(3*time.Hour), b.Next(now, 1, 3*time.Hour, r))
	assert.False(t, b.Next(now, 5, time.Minute, r).Before(now.Add(4*time.Hour)), "the backoff wins when it is later")
	noJitter := b
	noJitter.Jitter = 0
	assert.Equal(t, now.Add(8*time.Minute), noJitter.Next(now, 2, 0, nil))
}

func TestParsePolicy(t *testing.T) {
	p, err := retry.ParsePolicy([]string{"1m", "example.com/ebs=5m", "slow=1h"}, []string{"4", "example.com/ebs=20"})
	require.NoError(t, err)
	assert.Equal(t, time.Minute, p.For("").Base)
	assert.Equal(t, 4, p.For("").MaxAttempts)
	assert.Equal(t, 4, p.For("example.com/other").MaxAttempts, "other plugins take the global values")
	ebs := p.For("example.com/ebs")
	assert.Equal(t, 5*time.Minute, ebs.Base)
	assert.Equal(t, 20, ebs.MaxAttempts)
	assert.Equal(t, retry.CapDefault, ebs.Cap)
	assert.Equal(t, time.Hour, p.For("lethe.io/slow").Base, "a bare name is lethe.io/NAME")
	assert.Equal(t, 4, p.For("lethe.io/slow").MaxAttempts)

	def, err := retry.ParsePolicy(nil, nil)
	require.NoError(t, err)
	assert.Equal(t, retry.DefaultBackoff(), def.For("any"))

	for _, tc := range []struct {
		backoff, max []string
		msg          string
	}{
		{backoff: []string{"soon"}, msg: "--retry-backoff"},
		{backoff: []string{"-1m"}, msg: "positive"},
		{backoff: []string{"48h"}, msg: "at most"},
		{backoff: []string{"Bad Name=1m"}, msg: "--retry-backoff"},
		{max: []string{"0"}, msg: "--retry-max-attempts"},
		{max: []string{"x=many"}, msg: "--retry-max-attempts"},
	} {
		_, err := retry.ParsePolicy(tc.backoff, tc.max)
		require.ErrorContains(t, err, tc.msg, "%v %v", tc.backoff, tc.max)
	}
}
