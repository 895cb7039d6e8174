package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readiness is the body of /readyz (and of /healthz, with only Status).
type Readiness struct {
	Status  string   `json:"status"` // "ok" or "unavailable"
	Role    string   `json:"role,omitempty"`
	Holder  string   `json:"holder,omitempty"`
	Catalog string   `json:"catalog,omitempty"` // "ok" or why not
	Plugins *int     `json:"plugins,omitempty"`
	Leader  string   `json:"leader,omitempty"` // the current leader, as last seen
	Reasons []string `json:"reasons,omitempty"`
}

// DiskFullWindow is how long after a write refused for a full catalog
// disk /readyz says so, unless a write commits sooner.
const DiskFullWindow = 15 * time.Second

// Handler serves /metrics, /healthz and /readyz; any other path is a 404.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.health(mux)
	return mux
}

// apiHandler serves the API address: /healthz and /readyz without
// authentication, everything else through Config.APIHandler (which
// authenticates).
func (s *Server) apiHandler() http.Handler {
	mux := http.NewServeMux()
	s.health(mux)
	mux.Handle("/", s.cfg.APIHandler)
	return mux
}

// health adds /healthz and /readyz to mux.
func (s *Server) health(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, Readiness{Status: "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rd := s.Ready(r.Context())
		code := http.StatusOK
		if rd.Status != "ok" {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, rd)
	})
}

// Ready checks that the catalog answers and the plugins are loaded, and
// says whether this replica leads.
func (s *Server) Ready(ctx context.Context) Readiness {
	rd := Readiness{Status: "ok", Role: "follower", Holder: s.cfg.Deleter.Holder(), Catalog: "ok"}
	if s.Leading() {
		rd.Role = "leader"
	}
	if l := s.elector.Lease(); l != nil && l.Holder != "" {
		rd.Leader = l.Holder
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.cfg.Store.CurrentVersion(cctx); err != nil {
		rd.Catalog = err.Error()
		rd.Reasons = append(rd.Reasons, "catalog unreachable")
	} else if dr, ok := s.cfg.Store.(catalog.DiskReporter); ok {
		// Reads still answer on a full disk: a write refused for it
		// lately (the loops retry every second or so) says the replica
		// can change nothing.
		if at := dr.LastDiskFull(); !at.IsZero() && time.Since(at) < DiskFullWindow {
			rd.Catalog = fmt.Sprintf("disk full: a write was refused at %s", at.UTC().Format(time.RFC3339))
			rd.Reasons = append(rd.Reasons, "catalog disk full")
		}
	}
	if s.cfg.Plugins != nil {
		n := s.cfg.Plugins()
		rd.Plugins = &n
		if n == 0 && !s.cfg.NoPlugins {
			rd.Reasons = append(rd.Reasons, "no plugin loaded")
		}
	}
	if len(rd.Reasons) > 0 {
		rd.Status = "unavailable"
	}
	return rd
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) serveHTTP(ctx context.Context, wg *sync.WaitGroup, ln net.Listener, h http.Handler, errs chan<- error) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- err
		}
	})
	wg.Go(func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
}
