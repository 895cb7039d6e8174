package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// apiClient calls a running lethe server's API.
type apiClient struct {
	t    *testing.T
	base string
}

// apiResp is one answer: status, headers and body.
type apiResp struct {
	code   int
	header http.Header
	body   string
}

func (r apiResp) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(r.body), v), r.body)
}

// do sends method path with the bearer secret (none when empty) and the
// extra headers (name, value, ...).
func (c apiClient) do(method, path, secret string, headers ...string) apiResp {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, nil)
	require.NoError(c.t, err)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	checkOpenAPI(c.t, req, resp.StatusCode, resp.Header, b)
	return apiResp{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

// requireProblem checks an RFC 9457 problem of status whose detail
// contains detail.
func requireProblem(t *testing.T, r apiResp, status int, detail string) {
	t.Helper()
	require.Equal(t, status, r.code, r.body)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), r.body)
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	r.json(t, &p)
	assert.Equal(t, status, p.Status)
	assert.Equal(t, "about:blank", p.Type)
	assert.Equal(t, http.StatusText(status), p.Title)
	assert.Contains(t, p.Detail, detail)
}

// startAPI starts lethe server with the API on a free loopback port and
// waits until its /readyz answers (without a token).
func startAPI(t *testing.T, e *env, args ...string) apiClient {
	t.Helper()
	addr := freePort(t)
	p := e.start(append([]string{"server", "--api-addr", addr, "--poll-interval", "200ms"}, args...)...)
	c := apiClient{t: t, base: "http://" + addr}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if p.exited() {
			t.Fatalf("lethe server exited: %s", p.wait(t))
		}
		resp, err := http.Get(c.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			t.Fatalf("the API never became ready: %v", err)
		}
	}
}

func createToken(t *testing.T, e *env, name, role string) string {
	t.Helper()
	return strings.TrimSpace(e.ok("token", "create", name, "--role", role).stdout)
}

// TestAPIAuthAndRoles: nothing but /healthz and /readyz answers without a
// valid token (401 problem); a viewer reads and cannot write (403); a
// write from another site is refused (403) even with an operator's token;
// an operator's undelete is the CLI's (the CLI sees it) and is audited
// with the token's name; a revoked token stops working at once.
func TestAPIAuthAndRoles(t *testing.T) {
	catalogBackends(t, func(t *testing.T, e *env, _ func() string) {
		e.create("keep", 5, "--labels", "team=db")
		e.create("later", 5, "--deletion-delay", "1h", "--labels", "team=web")
		e.ok("backup", "delete", "later", "--yes", "--no-plugins")
		op := createToken(t, e, "op", "operator")
		viewer := createToken(t, e, "dash", "viewer")
		c := startAPI(t, e, "--no-plugins")

		for _, path := range []string{"/healthz", "/readyz"} {
			r := c.do("GET", path, "")
			require.Equal(t, http.StatusOK, r.code, "%s: %s", path, r.body)
		}
		for _, path := range []string{"/api/v1/backups", "/api/v1/openapi.yaml", "/api/v1/nope", "/metrics", "/assets/style.css", "/nope"} {
			r := c.do("GET", path, "")
			requireProblem(t, r, http.StatusUnauthorized, "Authorization: Bearer")
			assert.Equal(t, `Bearer realm="lethe"`, r.header.Get("WWW-Authenticate"))
			requireProblem(t, c.do("GET", path, "lethe_"+strings.Repeat("A", 43)), http.StatusUnauthorized, "")
			requireProblem(t, c.do("GET", path, op[:len(op)-1]), http.StatusUnauthorized, "")
		}
		requireProblem(t, c.do("GET", "/api/v1/backups", "", "Authorization", "Basic "+op), http.StatusUnauthorized, "")
		// The console's pages: the login page, 401.
		for _, path := range []string{"/", "/trash"} {
			r := c.do("GET", path, "")
			require.Equal(t, http.StatusUnauthorized, r.code, r.body)
			assert.Contains(t, r.body, "lethe console url")
			assert.NotContains(t, r.body, "later", "nothing of the catalog")
		}

		var who struct{ Name, Role string }
		c.do("GET", "/api/v1/whoami", viewer).json(t, &who)
		assert.Equal(t, "dash", who.Name)
		assert.Equal(t, "viewer", who.Role)

		// The viewer reads the CLI's own objects.
		r := c.do("GET", "/api/v1/backups/keep", viewer)
		require.Equal(t, http.StatusOK, r.code, r.body)
		assert.Equal(t, "application/json", r.header.Get("Content-Type"))
		assert.JSONEq(t, e.ok("get", "backup", "keep", "-o", "json").stdout, r.body, "the API serves the CLI's schema")

		// ... and cannot write; nothing changes.
		requireProblem(t, c.do("POST", "/api/v1/backups/later/undelete", viewer), http.StatusForbidden, "token dash has role viewer: writes need an operator token")
		// A browser's cross-site write is refused, whoever's token.
		requireProblem(t, c.do("POST", "/api/v1/backups/later/undelete", op, "Sec-Fetch-Site", "cross-site"), http.StatusForbidden, "cross-site request refused")
		requireProblem(t, c.do("POST", "/api/v1/backups/later/undelete", op, "Sec-Fetch-Site", "same-site"), http.StatusForbidden, "cross-site request refused")
		assert.Equal(t, "Scheduled", e.get("later").Phase, "refused writes change nothing")

		// The operator undeletes: the CLI sees it, the audit names the token.
		r = c.do("POST", "/api/v1/backups/later/undelete", op, "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusOK, r.code, r.body)
		var obj struct {
			Kind      string
			Lifecycle struct{ Phase string }
		}
		r.json(t, &obj)
		assert.Equal(t, "Backup", obj.Kind)
		assert.Equal(t, "Active", obj.Lifecycle.Phase)
		assert.Equal(t, "Active", e.get("later").Phase)
		var audit struct {
			Items []struct {
				Actor, Action string
				Resource      struct{ Name string }
			}
		}
		e.ok("audit", "--kind", "Backup", "--name", "later", "-o", "json")
		c.do("GET", "/api/v1/audit?kind=Backup&name=later", viewer).json(t, &audit)
		require.NotEmpty(t, audit.Items)
		last := audit.Items[len(audit.Items)-1]
		assert.Equal(t, "undelete", last.Action)
		assert.Equal(t, "token:op", last.Actor)
		// Undeleting again: 409, a problem.
		requireProblem(t, c.do("POST", "/api/v1/backups/later/undelete", op), http.StatusConflict, "has no deletion scheduled")
		requireProblem(t, c.do("GET", "/api/v1/backups/nope", viewer), http.StatusNotFound, "nope")

		// Revoked: 401 at once.
		e.ok("token", "revoke", "dash")
		requireProblem(t, c.do("GET", "/api/v1/whoami", viewer), http.StatusUnauthorized, "")
	})
}

// TestAPIListsPageAndFilter: the lists page by keyset (limit, after →
// next) and filter as the CLI does (labelSelector, phase, kind); bad
// parameters are 400 problems.
func TestAPIListsPageAndFilter(t *testing.T) {
	catalogBackends(t, func(t *testing.T, e *env, _ func() string) {
		for _, n := range []string{"b1", "b2", "b3", "b4", "b5"} {
			e.create(n, 2, "--labels", "team="+map[bool]string{true: "db", false: "web"}[n < "b3"])
		}
		e.create("b6", 2, "--deletion-delay", "1h")
		e.ok("backup", "delete", "b6", "--yes", "--no-plugins")
		viewer := createToken(t, e, "dash", "viewer")
		c := startAPI(t, e, "--no-plugins")

		type list struct {
			Kind  string
			Items []struct {
				Kind     string
				Metadata struct{ Name string }
			}
			Next string
		}
		var names []string
		after := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10)
			var l list
			r := c.do("GET", "/api/v1/backups?limit=2&after="+url.QueryEscape(after), viewer)
			require.Equal(t, http.StatusOK, r.code, r.body)
			r.json(t, &l)
			assert.Equal(t, "BackupList", l.Kind)
			assert.LessOrEqual(t, len(l.Items), 2)
			for _, it := range l.Items {
				names = append(names, it.Metadata.Name)
			}
			if l.Next == "" {
				break
			}
			after = l.Next
		}
		assert.Equal(t, []string{"b1", "b2", "b3", "b4", "b5", "b6"}, names, "every backup once, in order, across pages")

		var l list
		c.do("GET", "/api/v1/backups?labelSelector="+url.QueryEscape("team=db"), viewer).json(t, &l)
		require.Len(t, l.Items, 2)
		assert.Equal(t, "b1", l.Items[0].Metadata.Name)
		c.do("GET", "/api/v1/resources?kind=Backup&phase=Scheduled", viewer).json(t, &l)
		require.Len(t, l.Items, 1)
		assert.Equal(t, "b6", l.Items[0].Metadata.Name)

		requireProblem(t, c.do("GET", "/api/v1/resources", viewer), http.StatusBadRequest, "kind is required")
		requireProblem(t, c.do("GET", "/api/v1/backups?limit=0", viewer), http.StatusBadRequest, "limit")
		requireProblem(t, c.do("GET", "/api/v1/backups?phase=Gone", viewer), http.StatusBadRequest, "phase")
		requireProblem(t, c.do("GET", "/api/v1/backups?labelSelector="+url.QueryEscape("a in (("), viewer), http.StatusBadRequest, "")
		requireProblem(t, c.do("GET", "/api/v1/audit?since=soon", viewer), http.StatusBadRequest, "since")
	})
}
