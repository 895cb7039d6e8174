package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/view"
)

// dryRunParam reads ?dryRun= (true or false; default false).
func dryRunParam(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("dryRun")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("dryRun " + strconv.Quote(v) + ": use true or false")
	}
	return b, nil
}

// undelete returns a Scheduled resource to Active, as lethe undelete
// does (a backup through deletion.Undelete, which also clears an expired
// TTL), audited in the token's name; it answers the resource's object.
func (h *Handler) undelete(w http.ResponseWriter, r *http.Request) error {
	res, err := h.undeleteKey(r.Context(), keyOf(r))
	if err != nil {
		return err
	}
	o, err := view.ObjectOf(r.Context(), h.cfg.Store, res, false)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}

// undeleteKey undeletes k (the API's and the console's undelete).
func (h *Handler) undeleteKey(ctx context.Context, k catalog.Key) (*catalog.Resource, error) {
	res, err := backup.Get(ctx, h.cfg.Store, k)
	if err != nil {
		return nil, err
	}
	if res.Phase != catalog.PhaseScheduled {
		return nil, newProblem(http.StatusConflict, k.String()+" has no deletion scheduled (it is "+string(res.Phase)+"): only a Scheduled resource can be undeleted")
	}
	if k.Kind == backup.Kind {
		res, _, err = deletion.Undelete(ctx, h.cfg.Store, k.Name, h.cfg.Now())
		return res, err
	}
	return h.cfg.Store.Undelete(ctx, k, "undelete requested")
}

// requestDeletion requests a backup's deletion as lethe backup delete
// NAME --async does: scheduled for its grace window, or queued for the
// server's workers. With dryRun it answers the plan (lethe backup delete
// --dry-run -o json) and changes nothing.
func (h *Handler) requestDeletion(w http.ResponseWriter, r *http.Request) error {
	if h.cfg.Deleter == nil {
		return newProblem(http.StatusNotImplemented, "this server runs no deletions")
	}
	dryRun, err := dryRunParam(r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := backup.ValidateName(name); err != nil {
		return badRequest(err.Error())
	}
	opts := deletion.Options{Async: true, DefaultDelay: h.cfg.DefaultDelay, NoPlugins: h.cfg.NoPlugins}
	if dryRun {
		plan, err := h.cfg.Deleter.Plan(r.Context(), name, opts)
		if err != nil {
			return deletionProblem(err)
		}
		o, err := view.ToObject(view.DeletionPlanKind, view.DeletionPlan{Kind: view.DeletionPlanKind, Plan: plan})
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, o)
	}
	rep, err := h.cfg.Deleter.Delete(r.Context(), name, opts)
	if err != nil {
		return deletionProblem(err)
	}
	o, err := view.ToObject(view.DeletionReportKind, view.NewDeletionReport(rep))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, o)
}

// deletionProblem maps the deletion engine's refusals (lethe backup
// delete exits 2, 4 or 5 on them) to 409.
func deletionProblem(err error) error {
	var se *deletion.SkipPluginError
	var be *deletion.BlockedError
	var ue *deletion.UnfinishedError
	var ro *deletion.ReadOnlyError
	var me *deletion.MissingPluginsError
	var pe *registry.PluginProblemsError
	if errors.As(err, &se) || errors.As(err, &be) || errors.As(err, &ue) || errors.As(err, &ro) ||
		errors.As(err, &me) || errors.As(err, &pe) || errors.Is(err, deletion.ErrNoPlugins) {
		return newProblem(http.StatusConflict, err.Error())
	}
	return err
}

// retryID reads the {id} of a retry row.
func retryID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, badRequest("retry row id " + strconv.Quote(r.PathValue("id")) + ": want a positive whole number (lethe retry list)")
	}
	return id, nil
}

// retryAction runs retry now or discard on one row, as lethe retry now ID
// and lethe retry discard ID do, and answers the row as it is (with
// dryRun: as it would be).
func (h *Handler) retryAction(do func(q *retry.Queue, r *http.Request, id int64, dryRun bool) (*catalog.RetryRow, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if h.cfg.Retry == nil {
			return newProblem(http.StatusNotImplemented, "this server has no retry queue")
		}
		id, err := retryID(r)
		if err != nil {
			return err
		}
		dryRun, err := dryRunParam(r)
		if err != nil {
			return err
		}
		row, err := do(h.cfg.Retry, r, id, dryRun)
		if errors.Is(err, retry.ErrRunning) {
			return newProblem(http.StatusConflict, err.Error())
		}
		if err != nil {
			return err
		}
		o, err := view.ToObject(view.RetryItemKind, view.NewRetryItem(row))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, o)
	}
}

func (h *Handler) retryNow(w http.ResponseWriter, r *http.Request) error {
	return h.retryAction(func(q *retry.Queue, r *http.Request, id int64, dryRun bool) (*catalog.RetryRow, error) {
		return q.RetryNow(r.Context(), id, dryRun)
	})(w, r)
}

func (h *Handler) retryDiscard(w http.ResponseWriter, r *http.Request) error {
	return h.retryAction(func(q *retry.Queue, r *http.Request, id int64, dryRun bool) (*catalog.RetryRow, error) {
		return q.Discard(r.Context(), id, dryRun)
	})(w, r)
}

// listRetries serves the retry queue as lethe retry list -o json does,
// filtered by state and type.
func (h *Handler) listRetries(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := catalog.RetryFilter{Kind: q.Get("type")}
	switch s := catalog.RetryState(q.Get("state")); s {
	case "", catalog.RetryRetryable, catalog.RetryRunning, catalog.RetryDiscarded:
		f.State = s
	default:
		return badRequest("state " + strconv.Quote(string(s)) + ": use retryable, running or discarded")
	}
	rows, err := h.cfg.Store.ListRetries(r.Context(), f)
	if err != nil {
		return err
	}
	items, err := view.ToObjects(view.RetryItemKind, view.RetryItems(rows))
	if err != nil {
		return err
	}
	obj, err := view.ToObject(view.RetryItemKind+"List", view.List{Items: items})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, obj)
}
