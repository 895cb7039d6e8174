package cli

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHumanDurationOfAFarFutureTimeHasOneSign: a creation time centuries
// ahead (a forged velero-backup.json) makes time.Sub saturate at the most
// negative duration, which has no opposite; the age still reads as one
// negative duration, not "--9223372036s".
func TestHumanDurationOfAFarFutureTimeHasOneSign(t *testing.T) {
	require.Equal(t, "-106751d23h", human(time.Duration(math.MinInt64)))
	require.Equal(t, "106751d23h", human(time.Duration(math.MaxInt64)))
	require.Equal(t, "-1m05s", human(-65*time.Second))
	require.Equal(t, "2d3h", human(51*time.Hour))
}
