package api

import (
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// selectionTTL bounds how long a frozen selection of retry rows can be
// acted on; maxSelections bounds how many the server keeps.
const (
	selectionTTL  = time.Hour
	maxSelections = 1000
)

// RetrySelection is a frozen selection of retry rows as the API shows it:
// the query, the rows it matched when it was made, their count and hash.
type RetrySelection struct {
	ID        string         `json:"id"`
	Query     SelectionQuery `json:"query"`
	Count     int            `json:"count"`
	Hash      string         `json:"hash"`
	IDs       []int64        `json:"ids"`
	CreatedBy string         `json:"createdBy"`
	CreatedAt time.Time      `json:"createdAt"`
	ExpiresAt time.Time      `json:"expiresAt"`
}

// SelectionQuery is the retry list's filter a selection was made with.
type SelectionQuery struct {
	State string `json:"state,omitempty"`
	Type  string `json:"type,omitempty"`
	Key   string `json:"key,omitempty"`
}

// BulkResult is what a bulk action on a selection did, row by row.
type BulkResult struct {
	Selection string             `json:"selection"`
	Action    string             `json:"action"`
	Count     int                `json:"count"`
	Done      int                `json:"done"`
	Refused   int                `json:"refused"`
	Rows      []retry.RowOutcome `json:"rows"`
}

// selection is one frozen selection the server keeps.
type selection struct {
	sel       *retry.Selection
	query     SelectionQuery
	createdBy string
	created   time.Time
}

// selections are the frozen selections, in memory, each used at most
// once: a restart forgets them (select again).
type selections struct {
	mu  sync.Mutex
	m   map[string]*selection
	now func() time.Time
}

func newSelections(now func() time.Time) *selections {
	return &selections{m: map[string]*selection{}, now: now}
}

func (s *selections) add(sel *selection) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, o := range s.m {
		if !o.created.Add(selectionTTL).After(s.now()) {
			delete(s.m, id)
		}
	}
	if len(s.m) >= maxSelections {
		return "", newProblem(http.StatusServiceUnavailable, "too many open selections ("+strconv.Itoa(maxSelections)+"); act on one or wait for them to expire")
	}
	id := randomID()[:22]
	s.m[id] = sel
	return id, nil
}

// get is the live selection id, or a 404; take also removes it.
func (s *selections) get(id string, take bool) (*selection, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sel := s.m[id]
	if sel == nil || !sel.created.Add(selectionTTL).After(s.now()) {
		delete(s.m, id)
		return nil, newProblem(http.StatusNotFound, "no selection "+strconv.Quote(id)+": it was used, has expired ("+selectionTTL.String()+"), or the server restarted; select again")
	}
	if take {
		delete(s.m, id)
	}
	return sel, nil
}

// retryFilter reads the retry list's filter: state, type and key (from
// the query, or a form's fields).
func retryFilter(r *http.Request) (catalog.RetryFilter, SelectionQuery, error) {
	sq := SelectionQuery{State: r.FormValue("state"), Type: r.FormValue("type"), Key: r.FormValue("key")}
	f := catalog.RetryFilter{Kind: sq.Type, Key: sq.Key}
	switch s := catalog.RetryState(sq.State); s {
	case "", catalog.RetryRetryable, catalog.RetryRunning, catalog.RetryDiscarded:
		f.State = s
	default:
		return f, sq, badRequest("state " + strconv.Quote(string(s)) + ": use retryable, running or discarded")
	}
	return f, sq, nil
}

func (sel *selection) view(id string) RetrySelection {
	return RetrySelection{ID: id, Query: sel.query, Count: sel.sel.Count(), Hash: sel.sel.Hash, IDs: sel.sel.IDs,
		CreatedBy: sel.createdBy, CreatedAt: sel.created.UTC(), ExpiresAt: sel.created.Add(selectionTTL).UTC()}
}

// newSelection freezes the rows the filter matches now.
func (h *Handler) newSelection(r *http.Request) (string, *selection, error) {
	f, sq, err := retryFilter(r)
	if err != nil {
		return "", nil, err
	}
	s, err := retry.Select(r.Context(), h.cfg.Store, f)
	if err != nil {
		return "", nil, err
	}
	sel := &selection{sel: s, query: sq, createdBy: principalFrom(r.Context()).token.Name, created: h.cfg.Now()}
	id, err := h.selections.add(sel)
	return id, sel, err
}

// applySelection runs a bulk action on a selection, once: count and hash
// must be the selection's (what the caller was shown).
func (h *Handler) applySelection(r *http.Request, id, action, count, hash string) (*BulkResult, error) {
	if h.cfg.Retry == nil {
		return nil, newProblem(http.StatusNotImplemented, "this server has no retry queue")
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 || hash == "" {
		return nil, badRequest("count and hash are required: the selection's, as it was shown (POST /api/v1/retries/selections)")
	}
	sel, err := h.selections.get(id, false)
	if err != nil {
		return nil, err
	}
	if n != sel.sel.Count() || hash != sel.sel.Hash {
		return nil, newProblem(http.StatusConflict, "selection "+id+" holds "+strconv.Itoa(sel.sel.Count())+" rows with hash "+sel.sel.Hash+", not the "+count+" rows with hash "+hash+" given: nothing done")
	}
	if _, err := h.selections.get(id, true); err != nil {
		return nil, err // another request took it meanwhile
	}
	rows, err := h.cfg.Retry.ApplySelection(r.Context(), sel.sel, action, n, hash)
	if errors.Is(err, retry.ErrSelectionChanged) {
		return nil, newProblem(http.StatusConflict, "selection "+id+": "+err.Error()+"; nothing done")
	}
	if err != nil {
		return nil, err
	}
	res := &BulkResult{Selection: id, Action: action, Count: n, Rows: rows}
	for _, o := range rows {
		if o.Error == "" {
			res.Done++
		} else {
			res.Refused++
		}
	}
	return res, nil
}

func (h *Handler) createSelection(w http.ResponseWriter, r *http.Request) error {
	id, sel, err := h.newSelection(r)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/retries/selections/"+id)
	return writeJSON(w, http.StatusCreated, sel.view(id))
}

func (h *Handler) getSelection(w http.ResponseWriter, r *http.Request) error {
	sel, err := h.selections.get(r.PathValue("id"), false)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sel.view(r.PathValue("id")))
}

func (h *Handler) bulk(action string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		q := r.URL.Query()
		res, err := h.applySelection(r, r.PathValue("id"), action, q.Get("count"), q.Get("hash"))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, res)
	}
}
