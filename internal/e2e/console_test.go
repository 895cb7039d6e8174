package e2e

import (
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// browser is a cookie-keeping client that does not follow redirects.
type browser struct {
	t *testing.T
	c *http.Client
}

func newBrowser(t *testing.T, c *http.Client) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	if c == nil {
		c = &http.Client{}
	}
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{t: t, c: c}
}

func (b *browser) do(method, u string, form url.Values, headers ...string) apiResp {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	require.NoError(b.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1] // net/http sends req.Host, never a Host header
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := b.c.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return apiResp{code: resp.StatusCode, header: resp.Header, body: string(out)}
}

// login opens the URL lethe console url printed and checks the cookie it
// sets.
func (b *browser) login(loginURL string, secure bool) {
	b.t.Helper()
	r := b.do("GET", loginURL, nil)
	require.Equal(b.t, http.StatusSeeOther, r.code, r.body)
	require.Equal(b.t, "/", r.header.Get("Location"))
	sc := r.header.Get("Set-Cookie")
	assert.Contains(b.t, sc, "lethe_session=")
	assert.Contains(b.t, sc, "HttpOnly")
	assert.Contains(b.t, sc, "SameSite=Strict")
	if secure {
		assert.Contains(b.t, sc, "Secure")
	} else {
		assert.NotContains(b.t, sc, "Secure")
	}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestConsole: lethe console url logs a browser in once; the pages
// render with a strict CSP and no script; the trash lists what is
// Scheduled and its Undelete (a form with the anti-CSRF token) is the
// CLI's, audited with the login's name; a viewer's button is disabled
// and its write refused; a write without the anti-CSRF token or from
// another site is refused; revoking the login ends the session.
func TestConsole(t *testing.T) {
	catalogBackends(t, func(t *testing.T, e *env, _ func() string) {
		e.create("keep", 3)
		e.create("later", 3, "--deletion-delay", "1h")
		e.ok("backup", "delete", "later", "--yes", "--no-plugins")
		c := startAPI(t, e, "--no-plugins")
		addr := strings.TrimPrefix(c.base, "http://")

		r := e.ok("console", "url", "--api-addr", addr, "--role", "operator")
		loginURL := strings.TrimSpace(r.stdout)
		require.True(t, strings.HasPrefix(loginURL, c.base+"/login?token=lethe_"), loginURL)
		name := regexp.MustCompile(`console-[0-9a-f]{8}`).FindString(r.stderr)
		require.NotEmpty(t, name, r.stderr)
		requireOneErrorLine(t, e.run("console", "url"), "--api-addr is required")
		// A login is no bearer token.
		secret := strings.TrimPrefix(loginURL, c.base+"/login?token=")
		requireProblem(t, c.do("GET", "/api/v1/whoami", secret), http.StatusUnauthorized, "")

		op := newBrowser(t, nil)
		op.login(loginURL, false)
		again := newBrowser(t, nil).do("GET", loginURL, nil)
		require.Equal(t, http.StatusConflict, again.code, "a login URL works once: %s", again.body)
		assert.Contains(t, again.body, "already used")

		page := op.do("GET", c.base+"/", nil)
		require.Equal(t, http.StatusOK, page.code, page.body)
		assert.Contains(t, page.body, "<h1>Overview</h1>")
		assert.Contains(t, page.body, "<th scope=\"row\">Backup</th><td>1</td><td>1</td><td>0</td>")
		csp := page.header.Get("Content-Security-Policy")
		assert.Contains(t, csp, "script-src 'self'")
		assert.NotContains(t, csp, "unsafe-inline")
		assert.NotContains(t, page.body, "<script")
		assert.NotContains(t, page.body, "http://", "nothing from elsewhere (a CDN)")
		css := op.do("GET", c.base+"/assets/style.css", nil)
		require.Equal(t, http.StatusOK, css.code)
		assert.Equal(t, "text/css; charset=utf-8", css.header.Get("Content-Type"))
		icon := op.do("GET", c.base+"/assets/favicon.svg", nil)
		require.Equal(t, http.StatusOK, icon.code)
		assert.Equal(t, "image/svg+xml", icon.header.Get("Content-Type"))
		assert.Contains(t, page.body, `<link rel="icon" href="/assets/favicon.svg"`, "a page names its icon (else the browser asks for /favicon.ico, a 404 on its console)")
		assert.Equal(t, http.StatusNotFound, op.do("GET", c.base+"/assets/nope.js", nil).code)
		var who struct{ Name, Role string }
		op.do("GET", c.base+"/api/v1/whoami", nil).json(t, &who)
		assert.Equal(t, name, who.Name, "the session works for the API too")

		trash := op.do("GET", c.base+"/trash", nil)
		require.Equal(t, http.StatusOK, trash.code, trash.body)
		assert.Contains(t, trash.body, "<td>later</td>")
		assert.NotContains(t, trash.body, "<td>keep</td>")
		assert.Contains(t, trash.body, "lethe undelete backup later")
		assert.NotContains(t, trash.body, " disabled")
		m := csrfRe.FindStringSubmatch(trash.body)
		require.Len(t, m, 2, trash.body)
		csrf := m[1]
		form := url.Values{"kind": {"Backup"}, "name": {"later"}}

		// Refused: no anti-CSRF token, a wrong one, another site.
		for _, tc := range []struct {
			csrf, site, want string
		}{
			{"", "same-origin", "anti-CSRF"},
			{"wrong", "same-origin", "anti-CSRF"},
			{csrf, "cross-site", "cross-site request refused"},
		} {
			f := url.Values{"kind": form["kind"], "name": form["name"], "csrf": {tc.csrf}}
			r := op.do("POST", c.base+"/trash/undelete", f, "Sec-Fetch-Site", tc.site)
			require.Equal(t, http.StatusForbidden, r.code, "%+v: %s", tc, r.body)
			assert.Contains(t, r.body, tc.want)
		}
		assert.Equal(t, "Scheduled", e.get("later").Phase, "refused writes change nothing")

		// A viewer's console: the button is disabled, the write refused.
		vr := e.ok("console", "url", "--api-addr", addr)
		viewer := newBrowser(t, nil)
		viewer.login(strings.TrimSpace(vr.stdout), false)
		vt := viewer.do("GET", c.base+"/trash", nil)
		assert.Contains(t, vt.body, " disabled")
		vcsrf := csrfRe.FindStringSubmatch(vt.body)[1]
		f := url.Values{"kind": form["kind"], "name": form["name"], "csrf": {vcsrf}}
		vw := viewer.do("POST", c.base+"/trash/undelete", f, "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusForbidden, vw.code, vw.body)
		assert.Contains(t, vw.body, "writes need an operator token")
		// A viewer can log out: its session ends (the anti-CSRF token is
		// still needed).
		vo := viewer.do("POST", c.base+"/logout", url.Values{"csrf": {"wrong"}}, "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusForbidden, vo.code, vo.body)
		base, err := url.Parse(c.base)
		require.NoError(t, err)
		vcookies := viewer.c.Jar.Cookies(base)
		require.Len(t, vcookies, 1)
		vo = viewer.do("POST", c.base+"/logout", url.Values{"csrf": {vcsrf}}, "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusSeeOther, vo.code, vo.body)
		replay := newBrowser(t, nil).do("GET", c.base+"/api/v1/whoami", nil, "Cookie", vcookies[0].String())
		require.Equal(t, http.StatusUnauthorized, replay.code, "the viewer's session is over, even for its old cookie: %s", replay.body)

		// Undelete: the CLI sees it; the audit names the login.
		form.Set("csrf", csrf)
		u := op.do("POST", c.base+"/trash/undelete", form, "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusSeeOther, u.code, u.body)
		assert.Equal(t, "/trash?undeleted=Backup%2Flater", u.header.Get("Location"))
		assert.Equal(t, "Active", e.get("later").Phase)
		audit := e.ok("audit", "--kind", "Backup", "--name", "later").stdout
		assert.Contains(t, audit, "token:"+name)
		assert.Contains(t, op.do("GET", c.base+"/trash", nil).body, "The trash is empty.")

		// Revoking the login ends its session at once.
		e.ok("token", "revoke", name)
		gone := op.do("GET", c.base+"/", nil)
		require.Equal(t, http.StatusUnauthorized, gone.code)
		assert.Contains(t, gone.body, "lethe console url")
	})
}

// TestConsoleRefusesAForeignHost: without TLS the API answers only a
// loopback Host. A page that rebinds its own name to 127.0.0.1 gets 421
// and nothing else: the login it is sent is not used up, no cookie is set
// for its origin, and the login page does not tell the user to run lethe
// console url for the attacker's name.
func TestConsoleRefusesAForeignHost(t *testing.T) {
	catalogBackends(t, func(t *testing.T, e *env, _ func() string) {
		c := startAPI(t, e, "--no-plugins")
		addr := strings.TrimPrefix(c.base, "http://")
		loginURL := strings.TrimSpace(e.ok("console", "url", "--api-addr", addr, "--role", "operator").stdout)
		_, port, _ := strings.Cut(addr, ":")
		evil := "evil.example:" + port
		for _, path := range []string{strings.TrimPrefix(loginURL, c.base), "/", "/api/v1/whoami"} {
			r := newBrowser(t, nil).do("GET", c.base+path, nil, "Host", evil)
			require.Equal(t, http.StatusMisdirectedRequest, r.code, "%s: %s", path, r.body)
			assert.Empty(t, r.header.Get("Set-Cookie"), path)
			assert.NotContains(t, r.body, "--api-addr "+evil, path)
		}
		newBrowser(t, nil).login(loginURL, false) // the login was not used up
		r := newBrowser(t, nil).do("GET", "http://localhost:"+port+"/api/v1/whoami", nil)
		assert.Equal(t, http.StatusUnauthorized, r.code, "localhost is this machine: %s", r.body)
	})
}

// TestConsoleRefusesAnOversizeBody: a write's body is bounded
// (api.MaxBodyBytes): a multipart form with the right anti-CSRF token and
// a large file part is 413 before anything changes, rather than read to
// the end and spilled to temporary files.
func TestConsoleRefusesAnOversizeBody(t *testing.T) {
	catalogBackends(t, func(t *testing.T, e *env, _ func() string) {
		e.create("later", 3, "--deletion-delay", "1h")
		e.ok("backup", "delete", "later", "--yes", "--no-plugins")
		c := startAPI(t, e, "--no-plugins")
		addr := strings.TrimPrefix(c.base, "http://")
		op := newBrowser(t, nil)
		op.login(strings.TrimSpace(e.ok("console", "url", "--api-addr", addr, "--role", "operator").stdout), false)
		m := csrfRe.FindStringSubmatch(op.do("GET", c.base+"/trash", nil).body)
		require.Len(t, m, 2)
		var body strings.Builder
		mw := multipart.NewWriter(&body)
		for k, v := range map[string]string{"csrf": m[1], "kind": "Backup", "name": "later"} {
			require.NoError(t, mw.WriteField(k, v))
		}
		fw, err := mw.CreateFormFile("upload", "big.bin")
		require.NoError(t, err)
		_, err = fw.Write(make([]byte, 1<<20))
		require.NoError(t, err)
		require.NoError(t, mw.Close())
		req, err := http.NewRequest(http.MethodPost, c.base+"/trash/undelete", strings.NewReader(body.String()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := op.c.Do(req)
		require.NoError(t, err)
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, string(out))
		assert.Equal(t, "Scheduled", e.get("later").Phase, "a refused write changes nothing")
	})
}
