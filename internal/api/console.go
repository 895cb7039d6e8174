package api

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/lethehq/lethe/internal/apitoken"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// LoginPath is where a console login URL (lethe console url) lands.
const LoginPath = "/login"

// LogoutPath ends a console session: a write any role may make (with the
// session's anti-CSRF token), so a viewer can log out too.
const LogoutPath = "/logout"

// trashLimit is how many Scheduled resources of each kind the trash shows.
const trashLimit = 200

//go:embed console/*.html console/style.css console/favicon.svg
var consoleFS embed.FS

var pages = template.Must(template.ParseFS(consoleFS, "console/*.html"))

// pageData is what every page's template gets.
type pageData struct {
	Title, Page string
	Who         *catalog.Token
	CSRF        string
	CanWrite    bool
	// The page's own data.
	Overview *Overview
	Queue    *queueData
	Kinds    []kindCounts
	Rows     []trashRow
	More     bool
	Limit    int
	Done     string
	Message  string
	Hint     string
}

type kindCounts struct {
	Kind                        string
	Active, Scheduled, Deleting int64
}

type trashRow struct {
	Kind, Namespace, Name, Due, DueISO, CLI string
}

// consoleRoutes are the console's pages; page wraps them.
func (h *Handler) consoleRoutes() []route {
	return []route{
		{"GET", "/{$}", h.overviewPage},
		{"GET", "/trash", h.trashPage},
		{"POST", "/trash/undelete", h.trashUndelete},
		{"GET", "/queue", h.queuePage},
		{"POST", "/queue/select", h.queueSelect},
		{"POST", "/queue/selection/{id}/retry", h.queueBulk(retry.BulkRetry)},
		{"POST", "/queue/selection/{id}/discard", h.queueBulk(retry.BulkDiscard)},
		{"POST", LogoutPath, h.logout},
	}
}

// render writes a page with status.
func render(w http.ResponseWriter, status int, name string, d *pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = pages.ExecuteTemplate(w, name, d)
}

// page is wrap for the console: the same authentication and write
// checks, with errors as pages (a missing login is the login page, 401).
func (h *Handler) page(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := h.authenticate(r)
		if err == nil && isWrite(r.Method) {
			err = checkWrite(r, p, rt.pattern != LogoutPath)
		}
		if err == nil {
			ctx := context.WithValue(r.Context(), principalKey{}, p)
			err = rt.fn(w, r.WithContext(catalog.WithActor(ctx, p.actor())))
		}
		if err == nil {
			return
		}
		status, ok := statusOf(err)
		d := &pageData{Title: http.StatusText(status), Message: err.Error()}
		if p != nil {
			d.Who = p.token
		}
		switch {
		case status == http.StatusUnauthorized:
			d.Title, d.Message = "Log in", "Log in with the URL that lethe console url prints on a machine with the catalog's credentials:"
			d.Hint = "lethe console url --api-addr " + r.Host + " --role viewer|operator"
		case !ok:
			h.cfg.Logger.Error("console request failed", "method", r.Method, "path", r.URL.Path, "error", err)
			d.Message = "internal error; the server's log has the details"
		}
		render(w, status, "message.html", d)
	}
}

// data is the common part of a page's data.
func data(r *http.Request, title, page string) *pageData {
	p := principalFrom(r.Context())
	d := &pageData{Title: title, Page: page, Who: p.token, CanWrite: p.token.Role == catalog.TokenOperator}
	if p.session != nil {
		d.CSRF = p.session.csrf
	}
	return d
}

// login exchanges a console login (lethe console url) for a session
// cookie, once, and sends the browser on to the overview without the
// secret in its address bar.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	ctx := catalog.WithActor(r.Context(), "console:"+r.RemoteAddr)
	t, err := apitoken.ExchangeLogin(ctx, h.cfg.Store, r.URL.Query().Get("token"), h.cfg.Now())
	if err != nil {
		status, ok := statusOf(err)
		msg := "This login URL is not valid: it was already used, has expired (10 minutes), or was never made."
		if errors.Is(err, apitoken.ErrUnauthenticated) {
			status = http.StatusUnauthorized
		} else if !ok {
			h.cfg.Logger.Error("console login failed", "error", err)
			msg = "internal error; the server's log has the details"
		}
		render(w, status, "message.html", &pageData{Title: "Log in", Message: msg, Hint: "Run lethe console url again for a new one."})
		return
	}
	s := h.sessions.open(t.Hash)
	//nolint:gosec // Secure is set under TLS; a loopback address without TLS cannot send a Secure cookie (--api-addr refuses others)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: s.id, Path: "/", HttpOnly: true, Secure: h.cfg.TLS,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL / time.Second)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) error {
	if p := principalFrom(r.Context()); p.session != nil {
		h.sessions.drop(p.session.id)
	}
	//nolint:gosec // as in login: Secure under TLS
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: h.cfg.TLS,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusSeeOther)
	return nil
}

func (h *Handler) overviewPage(w http.ResponseWriter, r *http.Request) error {
	o, err := h.overview(r)
	if err != nil {
		return err
	}
	d := data(r, "Overview", "overview")
	d.Overview = o
	for k, c := range o.Phases {
		d.Kinds = append(d.Kinds, kindCounts{Kind: k, Active: c[catalog.PhaseActive], Scheduled: c[catalog.PhaseScheduled], Deleting: c[catalog.PhaseDeleting]})
	}
	sort.Slice(d.Kinds, func(i, j int) bool { return d.Kinds[i].Kind < d.Kinds[j].Kind })
	render(w, http.StatusOK, "overview.html", d)
	return nil
}

func (h *Handler) trashPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	kinds, err := h.cfg.Store.Kinds(ctx)
	if err != nil {
		return err
	}
	d := data(r, "Trash", "trash")
	d.Limit, d.Done = trashLimit, r.URL.Query().Get("undeleted")
	if d.Done != "" {
		d.Done += ": undeleted, Active again."
	}
	now := h.cfg.Now()
	for _, k := range kinds {
		page, err := h.cfg.Store.List(ctx, catalog.ListOptions{Kind: k, Phase: catalog.PhaseScheduled, Limit: trashLimit})
		if err != nil {
			return err
		}
		d.More = d.More || page.Continue != ""
		for _, res := range page.Items {
			row := trashRow{Kind: res.Kind, Namespace: res.Namespace, Name: res.Name, CLI: undeleteCLI(res.Key())}
			if res.DeletionDueAt != nil {
				row.DueISO = res.DeletionDueAt.UTC().Format(time.RFC3339)
				row.Due = row.DueISO + " (in " + res.DeletionDueAt.Sub(now).Round(time.Second).String() + ")"
			}
			d.Rows = append(d.Rows, row)
		}
	}
	render(w, http.StatusOK, "trash.html", d)
	return nil
}

// undeleteCLI is the CLI equivalent of the trash's Undelete.
func undeleteCLI(k catalog.Key) string {
	if k.Kind == backup.Kind {
		return "lethe undelete backup " + k.Name
	}
	s := "lethe undelete " + k.Kind + " " + k.Name
	if k.Namespace != "" {
		s += " -n " + k.Namespace
	}
	return s
}

func (h *Handler) trashUndelete(w http.ResponseWriter, r *http.Request) error {
	if err := parseForm(r); err != nil {
		return err
	}
	k := catalog.Key{Kind: r.PostFormValue("kind"), Namespace: r.PostFormValue("namespace"), Name: r.PostFormValue("name")}
	if k.Kind == "" || k.Name == "" {
		return badRequest("the form names no resource (kind and name)")
	}
	if _, err := h.undeleteKey(r.Context(), k); err != nil {
		return err
	}
	http.Redirect(w, r, "/trash?undeleted="+url.QueryEscape(k.String()), http.StatusSeeOther)
	return nil
}

// assets are the console's static files, by name under /assets/, with
// their content types.
var assets = map[string]string{
	"style.css":   "text/css; charset=utf-8",
	"favicon.svg": "image/svg+xml",
}

// serveAsset serves one of the console's static files.
func (h *Handler) serveAsset(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	ctype, ok := assets[name]
	if !ok {
		return newProblem(http.StatusNotFound, "no such asset: "+name)
	}
	b, err := consoleFS.ReadFile("console/" + name)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "no-cache")
	_, err = w.Write(b) //nolint:gosec // b is an embedded file the assets map names, served with its own content type
	return err
}
