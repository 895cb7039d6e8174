package browser

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seed registers two backups, keep (Active) and later (Scheduled for
// deletion in an hour, so in the trash), and starts lethe server with
// the noop plugin loaded.
func seed(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t, "noop")
	e.create("keep", 3)
	e.create("later", 3, "--deletion-delay", "1h")
	e.ok("plugin", "lock")
	e.ok("backup", "delete", "later", "--yes")
	require.Equal(t, "Scheduled", e.phase("later"))
	return e, e.server()
}

// pages opens every page the console's navigation links to, and checks
// each renders (200, its heading, its stylesheet applied) with nothing
// on the console. It returns the paths it visited.
func (tb *tab) pages(base string) []string {
	tb.t.Helper()
	links := eval[[]string](tb, `Array.from(document.querySelectorAll("header nav a")).map(a => a.getAttribute("href"))`)
	require.NotEmpty(tb.t, links, "the console's navigation")
	for _, p := range links {
		require.True(tb.t, strings.HasPrefix(p, "/"), "a link to elsewhere: %s", p)
		resp := tb.open(base + p)
		require.EqualValues(tb.t, http.StatusOK, resp.Status, p)
		assert.NotEmpty(tb.t, tb.text("main h1"), "%s has a heading", p)
		// The stylesheet loaded under the CSP: the header is laid out by it.
		rules := eval[int](tb, `Array.from(document.styleSheets).reduce((n, s) => n + s.cssRules.length, 0)`)
		assert.Positive(tb.t, rules, "%s: the embedded stylesheet applies", p)
		assert.Equal(tb.t, "page", eval[string](tb, `(document.querySelector('header nav a[href="`+p+`"]') || {}).ariaCurrent || ""`), p)
		tb.quiet(p)
	}
	return links
}

// TestBrowserConsoleOperator: in a real Chromium, the one-time login of
// lethe console url opens the overview; every page renders with nothing
// on the console; the CSP blocks an inline script (which the console
// reports, so the check above can see an error); a form posted from
// another site is refused and changes nothing; Undelete in the trash
// makes the backup Active for the CLI, audited with the login's name.
func TestBrowserConsoleOperator(t *testing.T) {
	b := startBrowser(t)
	e, base := seed(t)
	loginURL, name := e.consoleURL(base, "operator")
	op := newTab(t, b)

	resp := op.open(loginURL)
	require.EqualValues(t, http.StatusOK, resp.Status)
	require.Equal(t, base+"/", resp.URL, "the login lands on the overview, without the secret in the address")
	require.Equal(t, "Overview", op.text("main h1"))
	assert.Contains(t, op.text("header .who"), name+" (operator)")
	op.quiet("the login and the overview")
	op.screenshot("overview")
	visited := op.pages(base)
	assert.Contains(t, visited, "/trash")

	// The CSP refuses an inline script, and the console says so: the
	// console checks above can see an error.
	ran := eval[bool](op, `(() => { const s = document.createElement("script"); s.textContent = "window.inlineRan = true"; document.body.appendChild(s); return window.inlineRan === true })()`)
	assert.False(t, ran, "an inline script ran despite the CSP")
	csp := op.take()
	require.NotEmpty(t, csp, "the console reported no CSP violation")
	assert.Contains(t, strings.Join(csp, "\n"), "Content Security Policy")

	// A form on another site (another port of the same host) posting to
	// the trash: the browser sends the session cookie (same site) but
	// says Sec-Fetch-Site: same-site, and the server refuses.
	evil := evilSite(t, base)
	op.open(evil)
	r := op.response(chromedp.Click(chromedp.CSS("button")))
	assert.EqualValues(t, http.StatusForbidden, r.Status)
	assert.Contains(t, op.text("main"), "cross-site request refused")
	op.take()
	assert.Equal(t, "Scheduled", e.phase("later"), "a cross-site form changed the catalog")

	// Undelete in the trash.
	require.EqualValues(t, http.StatusOK, op.open(base+"/trash").Status)
	assert.Contains(t, op.text("main table"), "later")
	assert.NotContains(t, op.text("main table"), "keep", "an Active backup is not in the trash")
	assert.Equal(t, "lethe undelete backup later", op.text("main table code.cli"))
	op.quiet("/trash")
	op.screenshot("trash")
	r = op.response(chromedp.Click(chromedp.CSS(`button[aria-label="Undelete Backup later"]`)))
	require.EqualValues(t, http.StatusOK, r.Status)
	assert.Equal(t, base+"/trash?undeleted=Backup%2Flater", r.URL)
	assert.Contains(t, op.text(`main [role="status"]`), "Backup/later: undeleted")
	assert.Contains(t, op.text("main table"), "The trash is empty.")
	op.quiet("/trash after Undelete")
	assert.Equal(t, "Active", e.phase("later"), "the CLI sees the undelete")
	audit := e.ok("audit", "--kind", "Backup", "--name", "later").stdout
	assert.Contains(t, audit, "token:"+name, "the audit names the console's login")
}

// evilSite serves, on another port of base's host, a page with a form
// that posts an undelete of later to base's trash.
func evilSite(t *testing.T, base string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	page := fmt.Sprintf(`<!doctype html><html lang="en"><head><title>elsewhere</title><link rel="icon" href="data:,"></head><body><form method="post" action="%s/trash/undelete">
<input type="hidden" name="kind" value="Backup"><input type="hidden" name="name" value="later"><input type="hidden" name="csrf" value="guess">
<button type="submit">Win a prize</button></form></body></html>`, base)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { //nolint:gosec // a test server on loopback
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

// TestBrowserConsoleViewer: a viewer's console renders every page with
// nothing on the console; its Undelete is disabled; a write it makes
// anyway, from the page's form or by script to the API with the
// page's anti-CSRF token, is refused with 403 and changes nothing.
func TestBrowserConsoleViewer(t *testing.T) {
	b := startBrowser(t)
	e, base := seed(t)
	loginURL, name := e.consoleURL(base, "viewer")
	v := newTab(t, b)
	require.EqualValues(t, http.StatusOK, v.open(loginURL).Status)
	assert.Contains(t, v.text("header .who"), name+" (viewer)")
	v.quiet("the viewer's overview")
	v.pages(base)

	require.EqualValues(t, http.StatusOK, v.open(base+"/trash").Status)
	btn := `button[aria-label="Undelete Backup later"]`
	assert.True(t, eval[bool](v, `document.querySelector('`+btn+`').disabled`), "a viewer's Undelete is enabled")
	assert.Contains(t, v.text("main"), "viewer")
	v.quiet("the viewer's trash")

	// By script, to the API, with the session and its anti-CSRF token.
	got := eval[map[string]any](v, `(async () => {
		const csrf = document.querySelector('input[name="csrf"]').value;
		const r = await fetch("/api/v1/backups/later/undelete", {method: "POST", headers: {"X-CSRF-Token": csrf}});
		return {status: r.status, type: r.headers.get("Content-Type"), body: await r.json()};
	})()`)
	assert.EqualValues(t, http.StatusForbidden, got["status"])
	assert.Equal(t, "application/problem+json", got["type"])
	body, _ := got["body"].(map[string]any)
	assert.Contains(t, fmt.Sprint(body["detail"]), "writes need an operator token")
	// The form, its button enabled by hand.
	eval[bool](v, `(() => { document.querySelector('`+btn+`').disabled = false; return true })()`)
	r := v.response(chromedp.Click(chromedp.CSS(btn)))
	assert.EqualValues(t, http.StatusForbidden, r.Status)
	assert.Contains(t, v.text("main"), "writes need an operator token")
	v.take() // the 403s are on the console
	assert.Equal(t, "Scheduled", e.phase("later"), "a viewer's write changed the catalog")
}

// TestBrowserConsoleNoLogin: without a login every page is the login
// page (401) telling how to get one, with nothing of the catalog; the
// API answers 401 with a problem; a login URL works once.
func TestBrowserConsoleNoLogin(t *testing.T) {
	b := startBrowser(t)
	e, base := seed(t)
	anon := newTab(t, b)
	for _, p := range []string{"/", "/trash", "/queue"} {
		r := anon.open(base + p)
		assert.EqualValues(t, http.StatusUnauthorized, r.Status, p)
		assert.Equal(t, "Log in", anon.text("main h1"), p)
		assert.Contains(t, anon.text("main"), "lethe console url", p)
		assert.NotContains(t, anon.text("body"), "later", "%s: nothing of the catalog", p)
		// The page links no asset (they need a login too): its console
		// errors are its own 401 and, maybe, the browser's favicon's.
		time.Sleep(200 * time.Millisecond)
		load := "log.error (network): Failed to load resource: the server responded with a status of 401 (Unauthorized) "
		msgs := anon.take()
		assert.Contains(t, msgs, load+base+p)
		for _, m := range msgs {
			assert.Contains(t, []string{load + base + p, load + base + "/favicon.ico"}, m, p)
		}
	}
	r := anon.open(base + "/api/v1/backups")
	assert.EqualValues(t, http.StatusUnauthorized, r.Status)
	assert.Equal(t, "application/problem+json", r.Headers["Content-Type"])
	assert.NotContains(t, anon.text("body"), "later")
	anon.take()

	loginURL, _ := e.consoleURL(base, "operator")
	first := newTab(t, b)
	require.EqualValues(t, http.StatusOK, first.open(loginURL).Status)
	again := newTab(t, b)
	r = again.open(loginURL)
	assert.EqualValues(t, http.StatusConflict, r.Status, "a login URL works once")
	assert.Contains(t, again.text("main"), "already used")
	// The second browser still has no session.
	assert.EqualValues(t, http.StatusUnauthorized, again.open(base+"/trash").Status)
}
