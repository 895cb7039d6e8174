package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/server"
)

// TestServerCollectsGarbage: the server runs the collector from the
// change feed: a cascade requested with --async completes, and a
// resource whose grace window ends (the timers) is collected with its
// plugins run (it entered Deleting with the collector's finalizers).
func TestServerCollectsGarbage(t *testing.T) {
	e := newEnv(t)
	ctx := catalog.WithActor(context.Background(), "test")
	col, err := gc.New(gc.Config{Store: e.st, Plugins: gc.HostPlugins(e.pe.Host), PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	srv, err := server.New(&server.Config{Store: e.st, Deleter: e.del, Collector: col, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(rctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	o, err := e.st.Create(ctx, &catalog.Resource{Kind: "Schedule", Name: "nightly"})
	require.NoError(t, err)
	d, err := e.st.Create(ctx, &catalog.Resource{Kind: "Snapshot", Name: "s1", Owners: []catalog.OwnerRef{{UID: o.UID, Kind: o.Kind, Name: o.Name, BlockOwnerDeletion: true}}})
	require.NoError(t, err)
	_, err = col.Delete(ctx, o.Key(), gc.DeleteOptions{})
	require.NoError(t, err)

	soft, err := e.st.Create(ctx, &catalog.Resource{Kind: "Widget", Name: "soft", Annotations: map[string]string{catalog.AnnotationDeletionDelay: "50ms"}})
	require.NoError(t, err)
	_, err = col.Delete(ctx, soft.Key(), gc.DeleteOptions{})
	require.NoError(t, err)

	for _, r := range []*catalog.Resource{o, d, soft} {
		require.Eventually(t, func() bool {
			_, err := e.st.Get(ctx, r.Key())
			return errors.Is(err, catalog.ErrNotFound)
		}, 30*time.Second, 20*time.Millisecond, "%s", r.Key())
	}
	es, err := e.st.ListAudit(ctx, catalog.AuditFilter{UID: soft.UID})
	require.NoError(t, err)
	var fins []string
	for _, a := range es {
		if a.Action == "remove-finalizer" {
			fins = append(fins, a.Reason)
		}
	}
	require.Len(t, fins, 2, "the timers' path gets the collector's finalizers, so the plugins ran: %v", es)
}
