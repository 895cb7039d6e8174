package retry

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/secretfile"
)

// Webhooks are signed after Standard Webhooks
// (https://www.standardwebhooks.com/): each request carries
//
//	webhook-id:        the event id (the same on every attempt)
//	webhook-timestamp: when this attempt was signed, Unix seconds
//	webhook-signature: "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body))
//
// and each target has a secret of its own, written "whsec_" + base64 of
// the key. The timestamp is signed, so a receiver that refuses anything
// older than a few minutes cannot be replayed an old request.

// The Standard Webhooks request headers.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// SecretPrefix starts a Standard Webhooks secret: "whsec_" + base64(key).
const SecretPrefix = "whsec_"

// SecretMinBytes is the shortest key accepted in a whsec_ secret (the
// Standard Webhooks recommendation: 24 to 64 bytes).
const SecretMinBytes = 24

// Webhook is one notification target as configured: its URL (with any
// credentials in it, which never leave the configuration) and its key.
type Webhook struct {
	URL    string
	Secret []byte
}

// ID is the target as it is stored in the outbox and logged: the URL
// without credentials (see RedactWebhook).
func (w Webhook) ID() string { return RedactWebhook(w.URL) }

// SignWebhook returns the webhook-signature value of one request.
func SignWebhook(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// VerifyWebhook checks a request's Standard Webhooks headers against key
// and body, in constant time, and refuses a timestamp further than
// tolerance from now (either way). For receivers written in Go, and the
// tests; docs/retry.md shows the same check in a few lines.
func VerifyWebhook(key []byte, id, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	if id == "" || timestamp == "" || signature == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not a number")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("webhook-timestamp is %s from now (more than %s)", d.Round(time.Second), tolerance)
	}
	want := SignWebhook(key, id, ts, body)
	for _, s := range strings.Fields(signature) {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return errors.New("no webhook-signature matches")
}

// ParseSecret reads a secret: "whsec_" + base64 of a key of at least
// SecretMinBytes bytes.
func ParseSecret(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	b64, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, errors.New("want whsec_ followed by base64 (e.g. printf 'whsec_%s\\n' \"$(head -c 32 /dev/urandom | base64)\")")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("the part after whsec_ is not base64")
	}
	if len(key) < SecretMinBytes {
		return nil, fmt.Errorf("the key is %d bytes; use at least %d", len(key), SecretMinBytes)
	}
	return key, nil
}

// ReadSecretFile reads a secret file. Like ssh with a private key, it
// refuses a file that its group or others may read or write, or that is
// not a regular file.
func ReadSecretFile(path string) (string, error) {
	b, err := secretfile.Read(path)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// RedactWebhook returns a webhook URL without its credentials, as it is
// stored in the outbox and shown in logs: the user-info is dropped, every
// query value becomes xxxxx, and so does any path segment that looks like
// a token (16 characters or more, with both letters and digits, as in
// https://hooks.example/services/T0/B0/aZ3xQ9…). The fragment is
// dropped. A URL that does not parse is reduced to "(webhook URL hidden:
// it does not parse)".
func RedactWebhook(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Opaque != "" {
		return "(webhook URL hidden: it does not parse)"
	}
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok {
				parts[i] = k + "=" + redactedValue
			} else if tokenLike(p) {
				parts[i] = redactedValue
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	segs := strings.Split(u.EscapedPath(), "/")
	changed := false
	for i, s := range segs {
		if tokenLike(s) {
			segs[i], changed = redactedValue, true
		}
	}
	if changed {
		p := strings.Join(segs, "/")
		u.Path, u.RawPath = p, ""
	}
	return u.String()
}

const redactedValue = "xxxxx"

// tokenLike: 16 characters or more, with letters and digits.
func tokenLike(s string) bool {
	if len(s) < 16 {
		return false
	}
	letters, digits := false, false
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits = true
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			letters = true
		}
	}
	return letters && digits
}

// validWebhook checks a configured webhook URL.
func validWebhook(u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("--notify-webhook %q: use an http:// or https:// URL", RedactWebhook(u))
	}
	return nil
}

// WebhookIDs returns the stored form of each URL, refusing two URLs that
// differ only in their credentials (the outbox could not tell them apart).
func WebhookIDs(urls []string) ([]string, error) {
	ids := make([]string, len(urls))
	seen := map[string]bool{}
	for i, u := range urls {
		if err := validWebhook(u); err != nil {
			return nil, err
		}
		ids[i] = RedactWebhook(u)
		if seen[ids[i]] {
			return nil, fmt.Errorf("--notify-webhook %q is given twice (webhooks that differ only in their credentials or tokens cannot be told apart)", ids[i])
		}
		seen[ids[i]] = true
	}
	return ids, nil
}
