package browser

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBrowserQueueFrozenSelection: in a real Chromium, the queue page
// lists the retry rows; Select freezes the three that match, and
// Discard, clicked after two more rows matching the filter arrived,
// discards exactly the three (the CLI sees them discarded, the two new
// ones still retryable); nothing reaches the console.
func TestBrowserQueueFrozenSelection(t *testing.T) {
	b := startBrowser(t)
	e := newEnv(t, "recorder")
	e.ok("plugin", "lock")
	e.create("first", 6)
	e.create("second", 6)
	e.failItems(3)
	ctx := e.t.Context()
	cmd, _, _ := e.command(ctx, "backup", "delete", "first", "--yes", "--retry-backoff", "1h")
	var ee *exec.ExitError
	require.ErrorAs(t, cmd.Run(), &ee)
	require.Equal(t, 3, ee.ExitCode(), "three items of first fail (exit 3)")
	var frozen []int64
	for id := range e.retryStates() {
		frozen = append(frozen, id)
	}
	require.Len(t, frozen, 3)
	op := strings.TrimSpace(e.ok("token", "create", "op", "--role", "operator").stdout)
	base := e.server("--retry-backoff", "1h")
	loginURL, _ := e.consoleURL(base, "operator")

	tb := newTab(t, b)
	require.EqualValues(t, http.StatusOK, tb.open(loginURL).Status)
	require.EqualValues(t, http.StatusOK, tb.open(base+"/queue?state=retryable").Status)
	assert.Equal(t, "3 rows", tb.text("main table caption"))
	tb.quiet("/queue")
	r := tb.response(chromedp.Click(chromedp.Search(`//button[starts-with(normalize-space(.), "Select all")]`)))
	require.EqualValues(t, http.StatusOK, r.Status)
	assert.Contains(t, r.URL, "/queue?state=retryable&selection=")
	assert.Equal(t, "3", tb.text("#sel-count"))
	assert.Equal(t, idsHash(frozen), tb.text("#sel-hash"))
	tb.quiet("/queue with a selection")
	tb.screenshot("queue")

	// Two rows matching the filter arrive while the selection is shown.
	e.failItems(2)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/backups/second/deletion", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+op)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool { return len(e.retryStates()) == 5 }, 30*time.Second, 100*time.Millisecond)

	r = tb.response(chromedp.Click(chromedp.Search(`//button[starts-with(normalize-space(.), "Discard these")]`)))
	require.EqualValues(t, http.StatusOK, r.Status)
	assert.Contains(t, tb.text(`main [role="status"]`), "Discarded 3 of the 3 selected rows.")
	assert.Equal(t, "2 rows", tb.text("main table caption"), "the two new rows are still retryable")
	tb.quiet("/queue after the discard")
	for id, s := range e.retryStates() {
		if slices.Contains(frozen, id) {
			assert.Equal(t, "discarded", s, "row %d was selected", id)
		} else {
			assert.Equal(t, "retryable", s, "row %d came after the selection: the discard must leave it", id)
		}
	}
}

// idsHash is the selection hash docs/api.md documents: SHA-256 of the
// sorted decimal IDs, one a line, in hex.
func idsHash(ids []int64) string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	var b strings.Builder
	for _, id := range sorted {
		b.WriteString(strconv.FormatInt(id, 10) + "\n")
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}
