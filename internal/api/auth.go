package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/lethehq/lethe/internal/apitoken"
	"github.com/lethehq/lethe/internal/catalog"
)

// principal is who made a request: the token, and the console session it
// came through (nil for a bearer token).
type principal struct {
	token   *catalog.Token
	session *session
}

type principalKey struct{}

func principalFrom(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

// errUnauthenticated is the 401 every request without a valid token gets.
var errUnauthenticated = newProblem(http.StatusUnauthorized,
	"this endpoint needs a token: send Authorization: Bearer <secret> (lethe token create NAME --role viewer|operator), or log in to the console with the URL of lethe console url")

// authenticate finds the principal of r: its bearer token, else its
// console session cookie. Every token is looked up again in the catalog
// on every request, so a revoked token stops working at once.
func (h *Handler) authenticate(r *http.Request) (*principal, error) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, secret, ok := strings.Cut(auth, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, errUnauthenticated
		}
		t, err := apitoken.Check(r.Context(), h.cfg.Store, strings.TrimSpace(secret))
		if errors.Is(err, apitoken.ErrUnauthenticated) {
			return nil, errUnauthenticated
		}
		if err != nil {
			return nil, err
		}
		return &principal{token: t}, nil
	}
	if s := h.sessions.fromRequest(r); s != nil {
		t, err := h.cfg.Store.TokenByHash(r.Context(), s.tokenHash)
		if errors.Is(err, catalog.ErrNotFound) {
			h.sessions.drop(s.id) // the token was revoked
			return nil, errUnauthenticated
		}
		if err != nil {
			return nil, err
		}
		return &principal{token: t, session: s}, nil
	}
	return nil, errUnauthenticated
}

// isWrite reports whether a request changes something.
func isWrite(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// CSRFHeader carries a console session's anti-CSRF token on a write made
// by script; a form sends it as the field csrf.
const CSRFHeader = "X-CSRF-Token"

// checkWrite refuses a write that a browser made from another site
// (Sec-Fetch-Site other than same-origin or none), a console session's
// write without its anti-CSRF token, and, when needOperator, a viewer's
// write (a viewer may still end its own session).
func checkWrite(r *http.Request, p *principal, needOperator bool) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return newProblem(http.StatusForbidden, "cross-site request refused (Sec-Fetch-Site: "+site+"): writes are accepted only from the console's own pages or from clients that are not browsers")
	}
	if p.session != nil {
		got := r.Header.Get(CSRFHeader)
		if got == "" {
			if err := parseForm(r); err != nil {
				return err
			}
			got = r.PostFormValue("csrf")
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(p.session.csrf)) != 1 {
			return newProblem(http.StatusForbidden, "missing or wrong anti-CSRF token: reload the page and try again")
		}
	}
	if needOperator && p.token.Role != catalog.TokenOperator {
		return newProblem(http.StatusForbidden, "token "+p.token.Name+" has role "+string(p.token.Role)+": writes need an operator token")
	}
	return nil
}

// actor is the audit actor of p's writes.
func (p *principal) actor() string { return apitoken.Actor(p.token) }

// MaxBodyBytes bounds a request's body: no endpoint takes more than a
// small form, and a larger body (a multipart upload, which net/http would
// spill to temporary files without limit) is 413 before it is read.
const MaxBodyBytes = 64 << 10

// parseForm parses r's form body within MaxBodyBytes.
func parseForm(r *http.Request) error {
	err := r.ParseMultipartForm(MaxBodyBytes) //nolint:gosec // ServeHTTP bounds the body with http.MaxBytesReader
	var mb *http.MaxBytesError
	switch {
	case err == nil, errors.Is(err, http.ErrNotMultipart):
		return nil
	case errors.As(err, &mb):
		return newProblem(http.StatusRequestEntityTooLarge, "the request body is larger than "+strconv.Itoa(MaxBodyBytes)+" bytes")
	}
	return badRequest("the request body is not a form: " + err.Error())
}
