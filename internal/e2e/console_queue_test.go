package e2e

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/retry"
)

var (
	selCountRe = regexp.MustCompile(`name="count" value="([0-9]+)"`)
	selHashRe  = regexp.MustCompile(`name="hash" value="([0-9a-f]{64})"`)
)

// TestConsoleQueue: the queue page lists the retry rows, filtered; Select
// freezes the rows the filter matches, and its Discard acts on exactly
// those (by count and hash), not on rows that came after; a viewer's
// buttons are disabled and its select refused.
func TestConsoleQueue(t *testing.T) {
	e := newEnv(t, pluginRecorder)
	e.ok("plugin", "lock")
	e.create("first", 6)
	e.create("second", 6)
	e.failItems(3)
	r := e.run("backup", "delete", "first", "--yes", "--retry-backoff", "1h")
	require.Equal(t, 3, r.code, "%s", r)
	frozen := []int64{}
	for id := range e.retryStates() {
		frozen = append(frozen, id)
	}
	require.Len(t, frozen, 3)
	op := createToken(t, e, "op", "operator")
	c := startAPI(t, e, "--retry-backoff", "1h")
	addr := strings.TrimPrefix(c.base, "http://")

	b := newBrowser(t, nil)
	b.login(strings.TrimSpace(e.ok("console", "url", "--api-addr", addr, "--role", "operator").stdout), false)
	page := b.do("GET", c.base+"/queue?state=retryable", nil)
	require.Equal(t, http.StatusOK, page.code, page.body)
	assert.Contains(t, page.body, "<caption>3 rows</caption>")
	assert.Contains(t, page.body, "<td>Backup/first</td>")
	assert.Contains(t, page.body, "lethe retry list --state retryable")
	assert.Contains(t, page.body, `aria-current="page">Queue</a>`)
	assert.NotContains(t, page.body, " disabled")
	require.Equal(t, http.StatusBadRequest, b.do("GET", c.base+"/queue?state=bogus", nil).code)
	csrf := csrfRe.FindStringSubmatch(page.body)[1]
	none := b.do("GET", c.base+"/queue?state=discarded", nil)
	assert.Contains(t, none.body, "No rows match.")

	assert.Contains(t, page.body, `<input type="hidden" name="state" value="retryable">`, "Select keeps the page's filter")
	sel := b.do("POST", c.base+"/queue/select", url.Values{"csrf": {csrf}, "state": {"retryable"}}, "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusSeeOther, sel.code, sel.body)
	loc := sel.header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/queue?state=retryable&selection="), loc)
	shown := b.do("GET", c.base+loc, nil)
	require.Equal(t, http.StatusOK, shown.code, shown.body)
	count := selCountRe.FindStringSubmatch(shown.body)
	hash := selHashRe.FindStringSubmatch(shown.body)
	require.Len(t, count, 2, shown.body)
	require.Len(t, hash, 2, shown.body)
	assert.Equal(t, "3", count[1])
	assert.Equal(t, retry.SelectionHash(frozen), hash[1])
	assert.Contains(t, shown.body, "Discard these 3")

	// Rows matching the filter arrive after the selection.
	e.failItems(2)
	dq := c.do("POST", "/api/v1/backups/second/deletion", op)
	require.Equal(t, http.StatusAccepted, dq.code, dq.body)
	var all map[int64]string
	require.Eventually(t, func() bool { all = e.retryStates(); return len(all) == 5 }, 30*time.Second, 100*time.Millisecond)
	assert.Contains(t, b.do("GET", c.base+"/queue?state=retryable", nil).body, "<caption>5 rows</caption>")

	id := strings.TrimPrefix(loc, "/queue?state=retryable&selection=")
	form := url.Values{"csrf": {csrf}, "count": {count[1]}, "hash": {hash[1]}}
	d := b.do("POST", c.base+"/queue/selection/"+id+"/discard", form, "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusSeeOther, d.code, d.body)
	done := b.do("GET", c.base+d.header.Get("Location"), nil)
	assert.Contains(t, done.body, "Discarded 3 of the 3 selected rows.")
	for rid, s := range e.retryStates() {
		if slices.Contains(frozen, rid) {
			assert.Equal(t, "discarded", s, "row %d was selected", rid)
		} else {
			assert.Equal(t, "retryable", s, "row %d came after the selection: the discard must leave it", rid)
		}
	}
	again := b.do("POST", c.base+"/queue/selection/"+id+"/discard", form, "Sec-Fetch-Site", "same-origin")
	assert.Equal(t, http.StatusNotFound, again.code, "a selection is used once")

	// A viewer: disabled, refused.
	v := newBrowser(t, nil)
	v.login(strings.TrimSpace(e.ok("console", "url", "--api-addr", addr).stdout), false)
	vp := v.do("GET", c.base+"/queue", nil)
	require.Equal(t, http.StatusOK, vp.code, vp.body)
	assert.Contains(t, vp.body, `Select all 5 matching rows`)
	assert.Contains(t, vp.body, " disabled>Select all")
	vcsrf := csrfRe.FindStringSubmatch(vp.body)[1]
	vs := v.do("POST", c.base+"/queue/select", url.Values{"csrf": {vcsrf}}, "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusForbidden, vs.code, vs.body)
	assert.Contains(t, vs.body, "writes need an operator token")
}
