package retry_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// documentedReceiver is the Go receiver shown in docs/retry.md, built as
// it is written there.
func documentedReceiver(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "retry.md"))
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```go\n(// receiver.go.*?)```").FindAllSubmatch(doc, -1)
	require.Len(t, blocks, 1, "docs/retry.md shows one receiver.go")
	dir := t.TempDir()
	src := filepath.Join(dir, "receiver.go")
	require.NoError(t, os.WriteFile(src, blocks[0][1], 0o600))
	bin := filepath.Join(dir, "receiver")
	cmd := exec.Command("go", "build", "-o", bin, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the receiver in docs/retry.md does not build:\n%s", out)
	return bin
}

// syncBuffer is a bytes.Buffer safe for the process's writer goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDocumentedReceiverAcceptsLethesRequestsAndRefusesOldOnes runs the
// receiver of docs/retry.md against Lethe's sender: it accepts a
// notification signed with its secret, and refuses one signed more than
// five minutes ago and one signed with another secret (both stay pending:
// its 401 is a failed attempt).
func TestDocumentedReceiverAcceptsLethesRequestsAndRefusesOldOnes(t *testing.T) {
	bin := documentedReceiver(t)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secretFile := filepath.Join(t.TempDir(), "lethe.whsec")
	require.NoError(t, os.WriteFile(secretFile, []byte(retry.SecretPrefix+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600))
	whsec, err := retry.ReadSecretFile(secretFile)
	require.NoError(t, err)
	parsed, err := retry.ParseSecret(whsec)
	require.NoError(t, err)
	require.Equal(t, key, parsed)

	cmd := exec.Command(bin, "127.0.0.1:0", secretFile)
	var stdout syncBuffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	require.NoError(t, err)
	m := regexp.MustCompile(`listening on (\S+)`).FindStringSubmatch(line)
	require.NotNil(t, m, "receiver said %q", line)
	url := "http://" + m[1] + "/lethe"

	// The catalog's clock is stopped at the real time: the receiver reads
	// the real clock.
	f := newFixtureAt(t, "sqlite", time.Now())
	q := f.queue(t, f.st, policy(1), url)
	send := func(key []byte, now func() time.Time, b retry.Backoff) int {
		t.Helper()
		n, err := retry.NewNotifier(&retry.NotifierConfig{Store: f.st, Holder: "me", Now: now, Timeout: 5 * time.Second, Backoff: b,
			Webhooks: []retry.Webhook{{URL: url, Secret: key}}})
		require.NoError(t, err)
		sent, err := n.DeliverDue(f.ctx)
		require.NoError(t, err)
		return sent
	}
	lastError := func(state catalog.NotificationState) string {
		t.Helper()
		rows, err := f.st.ListNotifications(f.ctx, state, 0)
		require.NoError(t, err)
		require.Len(t, rows, 1, state)
		return rows[0].LastError
	}

	_, err = q.Record(f.ctx, failing(f.owner(t, "w"), "boom"))
	require.NoError(t, err)
	require.Equal(t, 1, send(key, f.clock.Now, retry.Backoff{}), "accepted")
	delivered, err := f.st.ListNotifications(f.ctx, catalog.NotificationDelivered, 0)
	require.NoError(t, err)
	require.Len(t, delivered, 1)
	// The receiver may print after it answered: wait for the line.
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), delivered[0].EventID+" {") }, 10*time.Second, 5*time.Millisecond,
		"the receiver printed the event: %q", stdout.String())

	_, err = q.Record(f.ctx, failing(f.owner(t, "v"), "boom"))
	require.NoError(t, err)
	require.Zero(t, send([]byte("another-secret-of-32-bytes-long!"), f.clock.Now, retry.Backoff{}), "another secret: refused")
	require.Contains(t, lastError(catalog.NotificationPending), "401")

	// Signed six minutes ago (one attempt, so that it is not tried again
	// at once: its backoff runs on the six-minute-old clock).
	_, err = q.Record(f.ctx, failing(f.owner(t, "u"), "boom"))
	require.NoError(t, err)
	sixMinutesAgo := func() time.Time { return f.clock.Now().Add(-6 * time.Minute) }
	require.Zero(t, send(key, sixMinutesAgo, retry.Backoff{Base: time.Second, Cap: time.Second, MaxAttempts: 1}), "too old: refused")
	require.Contains(t, lastError(catalog.NotificationFailed), "401")
	require.Equal(t, 1, strings.Count(stdout.String(), "\n"), "nothing more printed")
}
