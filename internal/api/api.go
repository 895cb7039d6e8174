package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/storageloc"
)

// Config is what the API serves from.
type Config struct {
	// Store is the catalog.
	Store catalog.Store
	// Logger logs the errors a caller did not cause (500s).
	Logger hclog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Deleter requests backup deletions (nil: the API refuses them with
	// 501); DefaultDelay and NoPlugins are the server's own options.
	Deleter      *deletion.Deleter
	DefaultDelay time.Duration
	NoPlugins    bool
	// Retry is the retry queue (nil: retry now and discard answer 501).
	Retry *retry.Queue
	// TLS: the address serves TLS, so the console's cookie is Secure.
	TLS bool
	// Plugins lists the plugins the server loaded (nil: none).
	Plugins func() []pluginhost.Info
	// Locations opens the declared storage locations, LocationSet (nil:
	// /api/v1/locations lists none).
	Locations   *blobstore.Locations
	LocationSet storageloc.Set
}

// Handler serves /api/v1/... (and, later, the console). Mount it on the
// API address; /healthz and /readyz are the server's.
type Handler struct {
	cfg        Config
	mux        *http.ServeMux
	sessions   *sessions
	selections *selections
}

//go:embed openapi.yaml
var openapiYAML []byte

// OpenAPI is the committed OpenAPI document of the API.
func OpenAPI() []byte { return openapiYAML }

// New returns the API's handler.
func New(cfg *Config) (*Handler, error) {
	if cfg == nil || cfg.Store == nil {
		return nil, errors.New("api: Config.Store is required")
	}
	c := *cfg
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	h := &Handler{cfg: c, mux: http.NewServeMux(), sessions: newSessions(c.Now), selections: newSelections(c.Now)}
	for _, rt := range h.routes() {
		h.mux.HandleFunc(rt.method+" "+rt.pattern, h.wrap(rt))
	}
	for _, rt := range h.consoleRoutes() {
		h.mux.HandleFunc(rt.method+" "+rt.pattern, h.page(rt))
	}
	// The login is the one path served without a token (besides the
	// server's /healthz and /readyz): it is how a browser gets a session,
	// with the one-time secret of lethe console url.
	h.mux.HandleFunc("GET "+LoginPath, h.login)
	h.mux.HandleFunc("GET /assets/{name}", h.wrap(route{"GET", "/assets/{name}", h.serveAsset}))
	// Anything else: authenticated first (an unknown path tells nothing
	// to a caller without a token), then 404.
	h.mux.HandleFunc("/", h.wrap(route{fn: func(_ http.ResponseWriter, r *http.Request) error {
		return newProblem(http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path+" (see /api/v1/openapi.yaml)")
	}}))
	return h, nil
}

// route is one endpoint. Every route but the catch-all needs a token; a
// write (any method but GET and HEAD) also an operator's, and passes the
// cross-site check.
type route struct {
	method, pattern string
	fn              func(w http.ResponseWriter, r *http.Request) error
}

func (h *Handler) routes() []route {
	return []route{
		{"GET", "/api/v1/openapi.yaml", h.getOpenAPI},
		{"GET", "/api/v1/whoami", h.getWhoami},
		{"GET", "/api/v1/overview", h.getOverview},
		{"GET", "/api/v1/backups", h.listBackups},
		{"GET", "/api/v1/backups/{name}", h.getResource},
		{"POST", "/api/v1/backups/{name}/undelete", h.undelete},
		{"POST", "/api/v1/backups/{name}/deletion", h.requestDeletion},
		{"GET", "/api/v1/resources", h.listResources},
		{"GET", "/api/v1/resources/{kind}/{name}", h.getResource},
		{"POST", "/api/v1/resources/{kind}/{name}/undelete", h.undelete},
		{"GET", "/api/v1/resources/{kind}/{name}/explain", h.explain},
		{"GET", "/api/v1/plugins", h.listPlugins},
		{"GET", "/api/v1/locations", h.listLocations},
		{"GET", "/api/v1/audit", h.listAudit},
		{"GET", "/api/v1/retries", h.listRetries},
		{"POST", "/api/v1/retries/{id}/retry", h.retryNow},
		{"POST", "/api/v1/retries/{id}/discard", h.retryDiscard},
		{"POST", "/api/v1/retries/selections", h.createSelection},
		{"GET", "/api/v1/retries/selections/{id}", h.getSelection},
		{"POST", "/api/v1/retries/selections/{id}/retry", h.bulk(retry.BulkRetry)},
		{"POST", "/api/v1/retries/selections/{id}/discard", h.bulk(retry.BulkDiscard)},
	}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	if !h.cfg.TLS && !loopbackHost(r.Host) {
		writeProblem(w, r, http.StatusMisdirectedRequest, "Host "+strconv.Quote(r.Host)+" is not a loopback name: this address serves no TLS, so it answers only requests for 127.0.0.1, [::1] or localhost (a web page that rebinds its own name to this machine gets nothing)")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	h.mux.ServeHTTP(w, r)
}

// loopbackHost reports whether a request's Host names this machine's
// loopback: without TLS, another name in Host is a browser that was sent
// here by DNS rebinding, and its pages would be that name's origin.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return loopback(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
}

// wrap authenticates, checks writes, sets the audit actor, and turns the
// route's error into a problem.
func (h *Handler) wrap(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := h.authenticate(r)
		if err == nil && isWrite(r.Method) && rt.method != "" {
			err = checkWrite(r, p, true)
		}
		if err == nil {
			ctx := context.WithValue(r.Context(), principalKey{}, p)
			ctx = catalog.WithActor(ctx, p.actor())
			err = rt.fn(w, r.WithContext(ctx))
		}
		if err == nil {
			return
		}
		status, ok := statusOf(err)
		detail := err.Error()
		if !ok {
			h.cfg.Logger.Error("API request failed", "method", r.Method, "path", r.URL.Path, "error", err)
			detail = "internal error; the server's log has the details"
		}
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lethe"`)
		}
		writeProblem(w, r, status, detail)
	}
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}

func (h *Handler) getOpenAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	_, err := w.Write(openapiYAML)
	return err
}

// Whoami is the token a request was made with.
type Whoami struct {
	Name string            `json:"name"`
	Role catalog.TokenRole `json:"role"`
	// Session: the request came through a console session.
	Session bool `json:"session"`
}

func (h *Handler) getWhoami(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	return writeJSON(w, http.StatusOK, Whoami{Name: p.token.Name, Role: p.token.Role, Session: p.session != nil})
}

// RouteInfo names one endpoint of the API.
type RouteInfo struct {
	Method, Pattern string
}

// Routes lists the API's endpoints (the OpenAPI test checks that each
// is documented).
func Routes() []RouteInfo {
	var out []RouteInfo
	for _, rt := range (&Handler{}).routes() {
		out = append(out, RouteInfo{Method: rt.method, Pattern: rt.pattern})
	}
	return out
}
