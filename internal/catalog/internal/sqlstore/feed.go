package sqlstore

import (
	"context"
	"errors"
	"sync"

	"github.com/lethehq/lethe/internal/catalog"
)

const feedBatch = 500

// CurrentVersion implements catalog.Store.
func (s *Store) CurrentVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.b.Reader().QueryRow(ctx, `SELECT value FROM lethe_version WHERE id = 1`).Scan(&v)
	return v, s.mapErr(err)
}

// Watch implements catalog.Store. The subscriber starts listening before
// it reads the backlog, then re-reads the change table after every wake-up
// (a NOTIFY on PostgreSQL, an in-process commit or a poll tick on SQLite),
// so it delivers every change after FromVersion exactly once, in order.
func (s *Store) Watch(ctx context.Context, opts catalog.WatchOptions) (catalog.Subscription, error) {
	if err := context.Cause(s.closing); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.closing, func() { cancel(context.Cause(s.closing)) })
	l, err := s.b.Listen(ctx)
	if err != nil {
		stop()
		cancel(nil)
		return nil, s.mapErr(err)
	}
	sub := &subscription{ch: make(chan catalog.Event, feedBatch), cancel: func() { cancel(nil) }, done: make(chan struct{})}
	s.subs.Add(1)
	go func() {
		defer s.subs.Done()
		defer stop()
		sub.run(ctx, s, l, opts)
	}()
	return sub, nil
}

type subscription struct {
	ch     chan catalog.Event
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	err error
}

func (sub *subscription) Events() <-chan catalog.Event { return sub.ch }

func (sub *subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

func (sub *subscription) Close() error {
	sub.cancel()
	<-sub.done
	return nil
}

func (sub *subscription) run(ctx context.Context, s *Store, l Listener, opts catalog.WatchOptions) {
	defer close(sub.done)
	defer close(sub.ch)
	defer l.Close()
	defer func() {
		if cause := context.Cause(ctx); errors.Is(cause, catalog.ErrClosed) {
			sub.mu.Lock()
			sub.err = cause
			sub.mu.Unlock()
		}
	}()
	last := opts.FromVersion
	fail := func(err error) {
		if ctx.Err() != nil || errors.Is(err, context.Canceled) {
			return // a clean stop
		}
		s.logger.Warn("change feed subscription failed", "error", err)
		sub.mu.Lock()
		sub.err = s.mapErr(err)
		sub.mu.Unlock()
	}
	for {
		for {
			evs, err := s.readChanges(ctx, last, opts.Kind)
			if err != nil {
				fail(err)
				return
			}
			for _, ev := range evs {
				select {
				case sub.ch <- ev:
					last = ev.Version
				case <-ctx.Done():
					return
				}
			}
			if len(evs) < feedBatch {
				break
			}
		}
		if err := l.Wait(ctx); err != nil {
			fail(err)
			return
		}
	}
}

func (s *Store) readChanges(ctx context.Context, after int64, kind string) ([]catalog.Event, error) {
	sql := `SELECT version, type, doc FROM changes WHERE version > $1`
	args := []any{after}
	if kind != "" {
		sql += ` AND kind = $3`
		args = append(args, feedBatch, kind)
	} else {
		args = append(args, feedBatch)
	}
	sql += ` ORDER BY version LIMIT $2`
	rows, err := s.b.Reader().Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []catalog.Event
	for rows.Next() {
		var (
			ev       catalog.Event
			typ, doc string
		)
		if err := rows.Scan(&ev.Version, &typ, &doc); err != nil {
			return nil, err
		}
		ev.Type = catalog.EventType(typ)
		if ev.Resource, err = decodeResource(doc); err != nil {
			return nil, err
		}
		// A DELETED event of CollectBatch stores the last document as
		// it was; its resourceVersion is the event's.
		ev.Resource.ResourceVersion = ev.Version
		out = append(out, ev)
	}
	return out, rows.Err()
}

// Broadcast wakes in-process waiters after a commit (used by SQLite).
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// NewBroadcast returns a Broadcast.
func NewBroadcast() *Broadcast { return &Broadcast{ch: make(chan struct{})} }

// C returns a channel closed by the next Signal.
func (b *Broadcast) C() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// Signal wakes every waiter.
func (b *Broadcast) Signal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}
