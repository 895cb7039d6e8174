package sqlstore

import (
	"context"
	"sync"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

// WakeListener receives the wake-up topics other replicas signal
// (PostgreSQL: LISTEN on the wake channel). Next blocks until one arrives
// or ctx ends.
type WakeListener interface {
	Next(ctx context.Context) (string, error)
	Close() error
}

// wakeHub fans this process's wake-ups out to its subscriptions.
type wakeHub struct {
	mu   sync.Mutex
	subs map[*wakeups]struct{}
}

type wakeups struct {
	ch     chan string
	cancel context.CancelFunc
	done   chan struct{}
}

func (w *wakeups) C() <-chan string { return w.ch }

func (w *wakeups) Close() error {
	w.cancel()
	<-w.done
	return nil
}

// send never blocks: a full buffer already holds a reason to look again.
func (w *wakeups) send(topic string) {
	select {
	case w.ch <- topic:
	default:
	}
}

// wakeLocal delivers topic to this process's subscriptions, after the
// commit that made it true.
func (s *Store) wakeLocal(topic string) {
	s.wake.mu.Lock()
	defer s.wake.mu.Unlock()
	for w := range s.wake.subs {
		w.send(topic)
	}
}

// Wakeups implements catalog.Store.
func (s *Store) Wakeups(ctx context.Context) (catalog.Wakeups, error) {
	ctx, cancel := context.WithCancel(ctx)
	l, err := s.b.ListenWake(ctx)
	if err != nil {
		cancel()
		return nil, s.mapErr(err)
	}
	w := &wakeups{ch: make(chan string, 64), cancel: cancel, done: make(chan struct{})}
	s.wake.mu.Lock()
	if s.wake.subs == nil {
		s.wake.subs = map[*wakeups]struct{}{}
	}
	s.wake.subs[w] = struct{}{}
	s.wake.mu.Unlock()
	s.subs.Add(1)
	go func() {
		defer s.subs.Done()
		defer close(w.done)
		defer func() {
			s.wake.mu.Lock()
			delete(s.wake.subs, w)
			s.wake.mu.Unlock()
			close(w.ch)
		}()
		stop := context.AfterFunc(s.closing, cancel)
		defer stop()
		if l == nil {
			<-ctx.Done()
			return
		}
		for {
			topic, err := l.Next(ctx)
			if ctx.Err() != nil {
				_ = l.Close()
				return
			}
			if err == nil {
				w.send(topic)
				continue
			}
			// The listening connection broke: say so once, wake the
			// subscriber (it may have missed a hint), and listen again.
			_ = l.Close()
			s.logger.Warn("catalog: wake-up listener failed; relying on polling until it reconnects", "error", err)
			w.send("")
			for l = nil; l == nil; {
				select {
				case <-ctx.Done():
					return
				case <-time.After(s.poll * 10):
				}
				l, _ = s.b.ListenWake(ctx)
			}
		}
	}()
	return w, nil
}
