package api

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// queueLimit is how many retry rows the queue page shows; a selection
// holds every matching row, however many.
const queueLimit = 200

// queueData is the queue page's own data.
type queueData struct {
	State, Type string
	Rows        []queueRow
	Total       int
	Selection   *RetrySelection
	CLI         string
}

type queueRow struct {
	ID                                          int64
	Type, Key, Item, Plugin, State, Error, Next string
	Attempts                                    int
}

// queueQuery is the filter of the queue page as a URL query.
func queueQuery(sq SelectionQuery) string {
	v := url.Values{}
	if sq.State != "" {
		v.Set("state", sq.State)
	}
	if sq.Type != "" {
		v.Set("type", sq.Type)
	}
	if sq.Key != "" {
		v.Set("key", sq.Key)
	}
	return v.Encode()
}

// queuePage lists the retry queue and its dead letters, filtered; with
// ?selection=ID it shows that frozen selection and its bulk actions.
func (h *Handler) queuePage(w http.ResponseWriter, r *http.Request) error {
	f, sq, err := retryFilter(r)
	if err != nil {
		return err
	}
	rows, err := h.cfg.Store.ListRetries(r.Context(), f)
	if err != nil {
		return err
	}
	d := data(r, "Queue and dead letters", "queue")
	q := &queueData{State: sq.State, Type: sq.Type, Total: len(rows), CLI: "lethe retry list"}
	if sq.State != "" {
		q.CLI += " --state " + sq.State
	}
	if sq.Type != "" {
		q.CLI += " --type " + sq.Type
	}
	for i, row := range rows {
		if i == queueLimit {
			d.More, d.Limit = true, queueLimit
			break
		}
		qr := queueRow{ID: row.ID, Type: row.Kind, Key: row.Key, Item: row.ItemID, Plugin: row.Plugin, State: string(row.State),
			Error: row.LastError, Attempts: row.Attempts}
		if !row.NextAttemptAt.IsZero() && row.State != catalog.RetryDiscarded {
			qr.Next = row.NextAttemptAt.UTC().Format(time.RFC3339)
		}
		q.Rows = append(q.Rows, qr)
	}
	if id := r.URL.Query().Get("selection"); id != "" {
		sel, err := h.selections.get(id, false)
		if err != nil {
			return err
		}
		v := sel.view(id)
		q.Selection = &v
	}
	d.Done = r.URL.Query().Get("done")
	d.Queue = q
	render(w, http.StatusOK, "queue.html", d)
	return nil
}

// queueSelect freezes the rows the page's filter matches now and shows
// the selection.
func (h *Handler) queueSelect(w http.ResponseWriter, r *http.Request) error {
	id, sel, err := h.newSelection(r)
	if err != nil {
		return err
	}
	q := queueQuery(sel.query)
	if q != "" {
		q += "&"
	}
	http.Redirect(w, r, "/queue?"+q+"selection="+url.QueryEscape(id), http.StatusSeeOther)
	return nil
}

// queueBulk runs retry or discard on a frozen selection, bound to the
// count and hash the page showed.
func (h *Handler) queueBulk(action string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		sel, err := h.selections.get(id, false)
		if err != nil {
			return err
		}
		res, err := h.applySelection(r, id, action, r.PostFormValue("count"), r.PostFormValue("hash"))
		if err != nil {
			return err
		}
		done := "Discarded"
		if action == retry.BulkRetry {
			done = "Requeued"
		}
		done += " " + strconv.Itoa(res.Done) + " of the " + strconv.Itoa(res.Count) + " selected rows"
		if res.Refused > 0 {
			done += "; " + strconv.Itoa(res.Refused) + " left as they were (already so, or held by a worker)"
		}
		v := url.Values{"done": {done + "."}}
		q := queueQuery(sel.query)
		if q != "" {
			q += "&"
		}
		http.Redirect(w, r, "/queue?"+q+v.Encode(), http.StatusSeeOther)
		return nil
	}
}
