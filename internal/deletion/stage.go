package deletion

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/pkg/plugin"
)

// stage runs one plugin: items that need it are sent to its session, the
// others pass through untouched.
type stage struct {
	d      *Deleter
	idx    int
	name   string
	backup plugin.Backup
	opts   pluginhost.SessionOptions
	in     <-chan *work
	out    chan<- *work
	fail   context.CancelCauseFunc

	mu       sync.Mutex
	inflight map[uint64]*work
	// clampLogged is set once a retryAfter out of range was logged.
	clampLogged bool
}

func (s *stage) wants(wk *work) bool {
	return wk.stop == nil && wk.next < len(wk.plugins) && wk.plugins[wk.next] == s.idx
}

func (s *stage) run(ctx context.Context) {
	defer close(s.out)
	var sess Session
	var recvDone chan struct{}
	defer func() {
		if sess == nil {
			return
		}
		// Finish the items in flight, unless the run is cancelled (a
		// signal, a lost lease): then abandon them. They are not settled,
		// so the next run sends them again.
		sess.CloseSend()
		select {
		case <-recvDone:
		case <-ctx.Done():
			sess.Close()
			<-recvDone
		}
		sess.Close()
	}()
	for wk := range s.in {
		if ctx.Err() != nil {
			continue // cancelled: drain without sending anything more
		}
		if !s.wants(wk) {
			select {
			case s.out <- wk:
			case <-ctx.Done():
			}
			continue
		}
		if sess == nil {
			var err error
			sess, err = s.d.cfg.Plugins.Open(ctx, s.name, s.backup, s.opts)
			if err != nil {
				s.fail(fmt.Errorf("plugin %s: %w", s.name, err))
				sess = nil
				continue
			}
			s.inflight = map[uint64]*work{}
			recvDone = make(chan struct{})
			go s.receive(ctx, sess, recvDone)
		}
		id := uint64(wk.it.Ordinal) //nolint:gosec // ordinals count from 0
		s.mu.Lock()
		s.inflight[id] = wk
		s.mu.Unlock()
		it := wk.it
		err := sess.Send(ctx, pluginhost.Item{ID: id, Item: plugin.Item{
			Group: it.Group, Version: it.Version, Resource: it.Resource, Kind: it.Kind,
			Namespace: it.Namespace, Name: it.Name, Object: it.Object,
		}})
		if err != nil {
			s.fail(fmt.Errorf("plugin %s: %w", s.name, err))
		}
	}
}

func (s *stage) receive(ctx context.Context, sess Session, done chan<- struct{}) {
	defer close(done)
	for res := range sess.Results() {
		s.mu.Lock()
		wk, ok := s.inflight[res.ID]
		delete(s.inflight, res.ID)
		s.mu.Unlock()
		if !ok {
			s.d.log.Warn("plugin returned a result for an unknown item; ignored", "plugin", s.name, "id", res.ID)
			continue
		}
		switch res.Outcome {
		case plugin.OutcomeDone, plugin.OutcomeSkipped:
			wk.settled = append(wk.settled, settledOutcome{plugin: s.idx, outcome: res.Outcome})
			wk.next++
		default:
			outcome := "failed"
			var next time.Time
			if res.Outcome == plugin.OutcomeBlocked {
				outcome = "blocked"
				after, clamped := clampRetryAfter(res.RetryAfter)
				if clamped && !s.clampLogged {
					s.clampLogged = true
					s.d.log.Warn("plugin asked for a retryAfter out of range; clamped (logged once per run)",
						"plugin", s.name, "retryAfter", res.RetryAfter, "clampedTo", after,
						"range", RetryAfterMin.String()+".."+RetryAfterMax.String())
				}
				if after > 0 {
					next = s.d.now().Add(after)
				}
			}
			wk.stop = &catalog.ItemOutcome{
				Ordinal: wk.it.Ordinal, ItemKey: wk.it.Key(), Plugin: s.name, Outcome: outcome,
				Message: res.Message, NextAttemptAt: next,
			}
		}
		select {
		case s.out <- wk:
		case <-ctx.Done():
		}
	}
}
