package api

import (
	"net/http"

	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/view"
)

// explain serves why a resource is where it is, as lethe explain KIND
// NAME -o json: the garbage collector's Explain, which starts no plugin.
func (h *Handler) explain(w http.ResponseWriter, r *http.Request) error {
	col, err := gc.New(gc.Config{Store: h.cfg.Store, NoPlugins: true, Logger: h.cfg.Logger, Retry: h.cfg.Retry})
	if err != nil {
		return err
	}
	e, err := col.Explain(r.Context(), keyOf(r))
	if err != nil {
		return err
	}
	o, err := view.ToObject(view.ExplanationKind, e)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}

// listPlugins serves the plugins this server loaded, as lethe plugin list
// -o json.
func (h *Handler) listPlugins(w http.ResponseWriter, _ *http.Request) error {
	views := []view.Plugin{}
	if h.cfg.Plugins != nil {
		for _, in := range h.cfg.Plugins() {
			views = append(views, view.NewPlugin(in))
		}
	}
	items, err := view.ToObjects(view.PluginKind, views)
	if err != nil {
		return err
	}
	o, err := view.ToObject(view.PluginKind+"List", view.List{Items: items})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}

// listLocations checks each storage location now and counts its
// backups, as lethe location list -o json.
func (h *Handler) listLocations(w http.ResponseWriter, r *http.Request) error {
	views := []*view.Location{}
	if h.cfg.Locations != nil {
		var err error
		if views, err = view.Locations(r.Context(), h.cfg.Store, h.cfg.Locations, h.cfg.LocationSet, h.cfg.LocationSet); err != nil {
			return err
		}
	}
	items, err := view.ToObjects(view.LocationStatusKind, views)
	if err != nil {
		return err
	}
	o, err := view.ToObject(view.LocationStatusKind+"List", view.List{Items: items})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}
