package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/leader"
	"github.com/lethehq/lethe/internal/view"
)

// Page sizes of the lists.
const (
	LimitDefault = 100
	LimitMax     = 1000
)

func badRequest(detail string) error { return newProblem(http.StatusBadRequest, detail) }

// limitParam reads ?limit= (default def, at most LimitMax).
func limitParam(r *http.Request, def int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > LimitMax {
		return 0, badRequest("limit " + strconv.Quote(v) + ": want a whole number from 1 to " + strconv.Itoa(LimitMax))
	}
	return n, nil
}

// listOptions reads a list's query: kind (unless fixed), namespace,
// labelSelector, phase, limit and after (the cursor a page's next gave).
func listOptions(r *http.Request, kind string) (catalog.ListOptions, error) {
	q := r.URL.Query()
	if kind == "" {
		kind = q.Get("kind")
		if kind == "" {
			return catalog.ListOptions{}, badRequest("kind is required, e.g. ?kind=Backup")
		}
	}
	opts := catalog.ListOptions{Kind: kind, Namespace: q.Get("namespace"), LabelSelector: q.Get("labelSelector"), Continue: q.Get("after")}
	if p := q.Get("phase"); p != "" {
		switch ph := catalog.Phase(p); ph {
		case catalog.PhaseActive, catalog.PhaseScheduled, catalog.PhaseDeleting:
			opts.Phase = ph
		default:
			return opts, badRequest("phase " + strconv.Quote(p) + ": use Active, Scheduled or Deleting")
		}
	}
	var err error
	opts.Limit, err = limitParam(r, LimitDefault)
	return opts, err
}

// list serves one page of resources of a kind as a <Kind>List, with the
// cursor of the next page in next.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, kind string) error {
	opts, err := listOptions(r, kind)
	if err != nil {
		return err
	}
	page, err := h.cfg.Store.List(r.Context(), opts)
	if err != nil {
		return err
	}
	out := view.List{Items: make([]view.Object, 0, len(page.Items)), Next: page.Continue}
	for _, res := range page.Items {
		o, err := view.ObjectOf(r.Context(), h.cfg.Store, res, false)
		if err != nil {
			return err
		}
		out.Items = append(out.Items, o)
	}
	obj, err := view.ToObject(opts.Kind+"List", out)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, obj)
}

// get serves one resource's object, as lethe get KIND NAME -o json.
func (h *Handler) get(w http.ResponseWriter, r *http.Request, k catalog.Key) error {
	res, err := backup.Get(r.Context(), h.cfg.Store, k)
	if err != nil {
		return err
	}
	o, err := view.ObjectOf(r.Context(), h.cfg.Store, res, true)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}

// keyOf is the resource a path names: {kind} (Backup for /backups),
// {name}, and ?namespace=.
func keyOf(r *http.Request) catalog.Key {
	kind := r.PathValue("kind")
	if kind == "" {
		kind = backup.Kind
	}
	return catalog.Key{Kind: kind, Namespace: r.URL.Query().Get("namespace"), Name: r.PathValue("name")}
}

func (h *Handler) listResources(w http.ResponseWriter, r *http.Request) error {
	return h.list(w, r, "")
}

func (h *Handler) listBackups(w http.ResponseWriter, r *http.Request) error {
	return h.list(w, r, backup.Kind)
}

func (h *Handler) getResource(w http.ResponseWriter, r *http.Request) error {
	return h.get(w, r, keyOf(r))
}

// listAudit serves the audit log as lethe audit -o json does, filtered by
// kind, namespace, name, uid and since (RFC 3339, or a duration such as
// 24h or 7d), the newest limit entries.
func (h *Handler) listAudit(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := catalog.AuditFilter{Kind: q.Get("kind"), Namespace: q.Get("namespace"), Name: q.Get("name"), UID: q.Get("uid")}
	if s := q.Get("since"); s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			f.Since = t
		} else if d, err := backup.ParseDuration(s); err == nil {
			f.Since = h.cfg.Now().Add(-d)
		} else {
			return badRequest("since " + strconv.Quote(s) + ": use a duration (24h, 7d) or an RFC 3339 time")
		}
	}
	var err error
	if f.Limit, err = limitParam(r, LimitDefault); err != nil {
		return err
	}
	entries, err := h.cfg.Store.ListAudit(r.Context(), f)
	if err != nil {
		return err
	}
	items, err := view.ToObjects(view.AuditEntryKind, view.AuditEntries(entries))
	if err != nil {
		return err
	}
	obj, err := view.ToObject(view.AuditEntryKind+"List", view.List{Items: items})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, obj)
}

// Overview is what the console's first page shows: the resources of each
// kind by phase, and the leader.
type Overview struct {
	// Phases counts, for each kind the catalog holds, its resources by
	// phase.
	Phases map[string]map[catalog.Phase]int64 `json:"phases"`
	// Leader is the replica that leads (empty: none right now).
	Leader string `json:"leader,omitempty"`
	// LeaderTerm is the leader's term.
	LeaderTerm int64 `json:"leaderTerm,omitempty"`
}

func (h *Handler) overview(r *http.Request) (*Overview, error) {
	ctx := r.Context()
	kinds, err := h.cfg.Store.Kinds(ctx)
	if err != nil {
		return nil, err
	}
	o := &Overview{Phases: map[string]map[catalog.Phase]int64{}}
	for _, k := range kinds {
		c, err := h.cfg.Store.CountByPhase(ctx, k)
		if err != nil {
			return nil, err
		}
		if len(c) > 0 {
			o.Phases[k] = c
		}
	}
	l, err := h.cfg.Store.GetLeader(ctx, leader.NameDefault)
	switch {
	case err == nil:
		if l.HeldBy(l.Holder, h.cfg.Now()) {
			o.Leader, o.LeaderTerm = l.Holder, l.Term
		}
	case !isNotFound(err):
		return nil, err
	}
	return o, nil
}

func (h *Handler) getOverview(w http.ResponseWriter, r *http.Request) error {
	o, err := h.overview(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}
