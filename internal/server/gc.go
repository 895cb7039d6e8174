package server

import (
	"context"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/softdelete"
)

// runCollector runs the garbage collector from the change feed until ctx
// ends (nothing when Config.Collector is nil).
func (s *Server) runCollector(ctx context.Context) error {
	if s.cfg.Collector == nil {
		return nil
	}
	return s.cfg.Collector.Run(catalog.WithActor(ctx, "gc"))
}

// timersStore is the catalog the grace-window timers use: a resource that
// is not a backup enters Deleting with the collector's finalizers, so its
// plugins run and its cascade holds it.
func (s *Server) timersStore() softdelete.Catalog {
	return struct {
		catalog.Lifecycle
		catalog.Feed
	}{gc.EnterDeleting(s.cfg.Store), s.cfg.Store}
}
