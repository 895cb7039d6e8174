package retry_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/retry"
)

// TestAWebhookRequestMissingAnyOneHeaderIsRefused: a receiver's check
// refuses a request that lacks any one of webhook-id, webhook-timestamp
// or webhook-signature, not only one that lacks all three.
func TestAWebhookRequestMissingAnyOneHeaderIsRefused(t *testing.T) {
	key := []byte(strings.Repeat("k", retry.SecretMinBytes))
	const id, ts = "msg_1", int64(1700000000)
	body := []byte(`{"a":1}`)
	sig := retry.SignWebhook(key, id, ts, body)
	at := time.Unix(ts, 0)
	stamp := strconv.FormatInt(ts, 10)
	require.NoError(t, retry.VerifyWebhook(key, id, stamp, sig, body, at, time.Minute))
	for name, h := range map[string][3]string{
		"no webhook-id":        {"", stamp, sig},
		"no webhook-timestamp": {id, "", sig},
		"no webhook-signature": {id, stamp, ""},
	} {
		require.ErrorContains(t, retry.VerifyWebhook(key, h[0], h[1], h[2], body, at, time.Minute), "missing", name)
	}
}

// TestAWebhookTimestampExactlyAtTheToleranceIsAccepted: the tolerance is
// inclusive both ways: a request signed exactly tolerance ago, or exactly
// tolerance ahead, passes; a second more is refused.
func TestAWebhookTimestampExactlyAtTheToleranceIsAccepted(t *testing.T) {
	key := []byte(strings.Repeat("k", retry.SecretMinBytes))
	const id, ts, tol = "msg_1", int64(1700000000), 5 * time.Minute
	body := []byte(`{"a":1}`)
	sig := retry.SignWebhook(key, id, ts, body)
	stamp := strconv.FormatInt(ts, 10)
	signed := time.Unix(ts, 0)
	require.NoError(t, retry.VerifyWebhook(key, id, stamp, sig, body, signed.Add(tol), tol), "signed exactly tolerance ago")
	require.NoError(t, retry.VerifyWebhook(key, id, stamp, sig, body, signed.Add(-tol), tol), "signed exactly tolerance ahead")
	require.Error(t, retry.VerifyWebhook(key, id, stamp, sig, body, signed.Add(tol+time.Second), tol))
	require.Error(t, retry.VerifyWebhook(key, id, stamp, sig, body, signed.Add(-tol-time.Second), tol))
}

// TestRedactWebhookHidesPathSegmentsOf16CharactersWithLettersAndDigits:
// a path segment is hidden as a token when it has 16 characters or more
// and both letters and digits; a shorter one, or one of letters only or
// digits only, is kept.
func TestRedactWebhookHidesPathSegmentsOf16CharactersWithLettersAndDigits(t *testing.T) {
	for _, tc := range []struct{ seg, want string }{
		{"abcdefgh12345678", "xxxxx"},                      // 16, letters and digits
		{"abcdefg1234567", "abcdefg1234567"},               // 14
		{"abcdefgh1234567", "abcdefgh1234567"},             // 15
		{"notificationsendpoint", "notificationsendpoint"}, // letters only
		{"12345678901234567890", "12345678901234567890"},   // digits only
		{"ABCDEFGH12345678", "xxxxx"},                      // capitals count as letters
	} {
		assert.Equal(t, "https://hooks.example/x/"+tc.want, retry.RedactWebhook("https://hooks.example/x/"+tc.seg), tc.seg)
	}
}

// TestWebhookTargetsMustBeHTTPURLsWithAHostAndDistinct: a configured
// webhook is an http:// or https:// URL with a host, and two URLs that
// differ only in their credentials are refused (the outbox stores them
// alike).
func TestWebhookTargetsMustBeHTTPURLsWithAHostAndDistinct(t *testing.T) {
	ids, err := retry.WebhookIDs([]string{"https://hooks.example/a", "http://hooks.example/b"})
	require.NoError(t, err)
	require.Equal(t, []string{"https://hooks.example/a", "http://hooks.example/b"}, ids)
	for _, bad := range []string{"ftp://hooks.example/a", "https:///a", "hooks.example/a", "mailto:ops@example.com", "https://hooks.example/%zz"} {
		_, err := retry.WebhookIDs([]string{bad})
		require.ErrorContains(t, err, "use an http:// or https:// URL", bad)
	}
	_, err = retry.WebhookIDs([]string{"https://a:one@hooks.example/x", "https://b:two@hooks.example/x"})
	require.ErrorContains(t, err, "given twice")
}

// TestAMaximumOfOneAttemptIsAccepted: --retry-max-attempts 1 (no retry
// at all) is a valid maximum, globally and for one plugin; 0 is refused.
func TestAMaximumOfOneAttemptIsAccepted(t *testing.T) {
	p, err := retry.ParsePolicy(nil, []string{"1", "example.com/ebs=1"})
	require.NoError(t, err)
	require.Equal(t, 1, p.Default.MaxAttempts)
	require.Equal(t, 1, p.For("example.com/ebs").MaxAttempts)
	_, err = retry.ParsePolicy(nil, []string{"0"})
	require.Error(t, err)
}
