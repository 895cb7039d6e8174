package pluginhost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lethehq/lethe/pkg/plugin"
	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// Defaults of SessionOptions, and batching limits.
const (
	BatchSizeDefault = 256
	// Linger is how long a partial batch waits for more items before it
	// is sent anyway.
	Linger = 2 * time.Millisecond
	// maxBatchBytes caps the items' bytes in one stream message.
	maxBatchBytes = 1 << 20
)

// ErrSessionClosed is returned by Send once the session is closed.
var ErrSessionClosed = errors.New("plugin session is closed")

// Session streams the items of one backup through one plugin. Send items
// from one goroutine while another reads Results: every item sent gets
// exactly one Result, and Results is closed after CloseSend once every
// result is out. Items are batched on the wire. After a plugin crash, the
// items that were in flight are redelivered to the restarted process one at
// a time, before any other item: an item the process dies on while
// executing it alone fails, and the others are not charged for the crash.
// Delivery is at least once, but each ID gets one Result only.
type Session struct {
	h       *Host
	b       *binary
	name    string
	backup  *pluginv1.Backup
	batch   int
	window  int
	timeout time.Duration
	grace   time.Duration
	// veleroBackup is SessionOptions.VeleroBackup, veleroLocation
	// SessionOptions.VeleroLocation.
	veleroBackup   []byte
	veleroLocation string

	ctx         context.Context
	cancel      context.CancelCauseFunc
	slots       chan struct{} // window: Send takes a slot, a result frees it
	results     chan Result
	notify      chan struct{} // cap 1: wakes the writer
	closeSendCh chan struct{}
	done        chan struct{}

	mu          sync.Mutex
	pending     map[uint64]*pendingItem // sent by the caller, no result yet
	outbox      []*pendingItem          // to send on the current stream
	outboxBytes int
	closeSend   bool
	broken      error // set when the plugin is given up on
	cancels     []uint64
	inflight    []*pendingItem // on the wire of the current stream, by send time
	timedOut    []*pendingItem // cancelled for a timeout, no result yet
	gen         uint64         // current stream
	// suspects were in flight when a process died; they are sent alone, one
	// at a time, before the outbox. isolating is the one on the wire.
	suspects  []*pendingItem
	isolating *pendingItem
}

type pendingItem struct {
	msg        pluginv1.Item // in the same allocation
	size       int
	gen        uint64 // stream it was last sent on
	sentAt     time.Time
	timedOutAt time.Time
	done       bool
}

// OpenSession opens a session with the named plugin (a bare name means
// lethe.io/name) for one backup. ctx bounds the opening only (the process
// may need a restart); the session lives until CloseSend's results are all
// out, or Close.
func (h *Host) OpenSession(ctx context.Context, pluginName string, backup plugin.Backup, opts SessionOptions) (*Session, error) {
	full, err := plugin.NormalizeName(pluginName)
	if err != nil {
		return nil, err
	}
	e, ok := h.plugins[full]
	if !ok {
		return nil, fmt.Errorf("no plugin named %q in %s", full, h.cfg.Dir)
	}
	if opts.BatchSize < 0 || opts.Window < 0 || opts.ItemTimeout < 0 {
		return nil, fmt.Errorf("pluginhost: negative SessionOptions %+v", opts)
	}
	batch := cmp.Or(opts.BatchSize, BatchSizeDefault)
	window := opts.Window
	if window == 0 {
		// Enough to keep the plugin busy and the wire full, but no more:
		// an item's timeout runs from when it is sent, so items should
		// not queue long inside the plugin.
		window = min(4*batch, max(2*e.info.MaxConcurrency, 1))
	}
	batch = min(batch, window)
	if h.isClosed() {
		return nil, ErrClosed
	}
	e.bin.resetIfBroken()
	if _, err := e.bin.acquire(ctx); err != nil {
		return nil, err
	}
	s := &Session{
		h:              h,
		b:              e.bin,
		name:           full,
		backup:         backupToProto(backup),
		batch:          batch,
		window:         window,
		timeout:        cmp.Or(opts.ItemTimeout, h.timeoutFor(full)),
		grace:          h.cfg.CancelGrace,
		veleroBackup:   opts.VeleroBackup,
		veleroLocation: opts.VeleroLocation,
		slots:          make(chan struct{}, window),
		results:        make(chan Result, window),
		notify:         make(chan struct{}, 1),
		closeSendCh:    make(chan struct{}),
		done:           make(chan struct{}),
		pending:        make(map[uint64]*pendingItem, window),
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	go s.run()
	return s, nil
}

// Send queues an item for the plugin. It blocks while the window of
// unanswered items is full. The session keeps a reference to
// it.Item.Object until the item's result is out: do not modify it.
func (s *Session) Send(ctx context.Context, it Item) error {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return ErrSessionClosed
	}
	size := len(it.Item.Object) + len(it.Item.Name) + len(it.Item.Namespace) + len(it.Item.Resource) + 64
	s.mu.Lock()
	if s.closeSend {
		s.mu.Unlock()
		<-s.slots
		return errors.New("pluginhost: Send after CloseSend")
	}
	if _, dup := s.pending[it.ID]; dup {
		s.mu.Unlock()
		<-s.slots
		return fmt.Errorf("pluginhost: item id %d is already pending", it.ID)
	}
	pi := &pendingItem{size: size}
	itemToProto(&pi.msg, it)
	s.pending[it.ID] = pi
	s.outbox = append(s.outbox, pi)
	s.outboxBytes += size
	n := len(s.outbox)
	wake := n == 1 || n == s.batch || len(s.pending) == s.window || s.outboxBytes >= maxBatchBytes
	s.mu.Unlock()
	if wake {
		s.signal()
	}
	return nil
}

// Results returns the channel of results. It is closed after CloseSend once
// every item has its result, or after Close.
func (s *Session) Results() <-chan Result { return s.results }

// CloseSend says no more items will be sent.
func (s *Session) CloseSend() {
	s.mu.Lock()
	if !s.closeSend {
		s.closeSend = true
		close(s.closeSendCh)
	}
	s.mu.Unlock()
	s.signal()
}

// Close abandons the session: the stream is cancelled (the plugin's ctx
// is cancelled), items still pending get no result, and Results is closed.
// It waits for the session's goroutines to end.
func (s *Session) Close() {
	s.cancel(ErrSessionClosed)
	<-s.done
}

func (s *Session) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// emit hands a result to the caller and frees its window slot. Only the
// run goroutine calls it.
func (s *Session) emit(r Result) {
	select {
	case s.results <- r:
		<-s.slots
	case <-s.ctx.Done():
	}
}

func (s *Session) run() {
	defer func() {
		s.cancel(context.Canceled)
		close(s.results)
		close(s.done)
	}()
	for {
		if s.ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		finished := s.closeSend && len(s.pending) == 0
		broken := s.broken
		s.mu.Unlock()
		if finished {
			return
		}
		if broken != nil {
			s.failOutbox(broken)
			select {
			case <-s.notify:
			case <-s.closeSendCh:
			case <-s.ctx.Done():
			}
			continue
		}
		p, err := s.b.acquire(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			s.broken = err
			s.mu.Unlock()
			continue
		}
		err = s.stream(p)
		if err == nil || s.ctx.Err() != nil {
			return
		}
		s.b.fail(p, err)
		s.afterFailure(err)
	}
}

// failOutbox fails every item waiting to be sent, suspects included.
func (s *Session) failOutbox(err error) {
	s.mu.Lock()
	out := append(s.suspects, s.outbox...)
	s.suspects = nil
	s.outbox = nil
	s.outboxBytes = 0
	for _, pi := range out {
		delete(s.pending, pi.msg.Id)
	}
	s.mu.Unlock()
	for _, pi := range out {
		s.emit(Result{ID: pi.msg.Id, Result: plugin.Result{Outcome: plugin.OutcomeFailed, Message: sanitizeMessage(err.Error())}})
	}
}

// afterFailure settles the items that were on the wire of a stream that
// broke. Timed-out items fail. An item that was on the wire alone fails: the
// process died executing it. After a hang, whose culprit is the timed-out
// item, the others go back to the front of the outbox; after any other
// failure they become suspects, to be sent alone one at a time. No item is
// charged for a failure it did not cause.
func (s *Session) afterFailure(cause error) {
	s.mu.Lock()
	waiting := make(map[*pendingItem]bool, len(s.outbox)+len(s.suspects))
	for _, pi := range s.outbox {
		waiting[pi] = true
	}
	for _, pi := range s.suspects {
		waiting[pi] = true
	}
	var failed []Result
	var others []*pendingItem
	for id, pi := range s.pending {
		if waiting[pi] {
			continue
		}
		switch {
		case !pi.timedOutAt.IsZero():
			delete(s.pending, id)
			failed = append(failed, s.failure(id, fmt.Sprintf("timed out after %s; the plugin did not answer the cancellation within %s and was killed", s.timeout, s.grace)))
		case pi == s.isolating:
			delete(s.pending, id)
			msg := fmt.Sprintf("plugin %s failed while executing this item alone: %v", s.name, cause)
			if lines := s.b.tail.lines(); len(lines) > 0 {
				msg += "; last stderr: " + strings.Join(lines, " | ")
			}
			failed = append(failed, s.failure(id, msg))
		default:
			pi.gen = 0
			others = append(others, pi)
		}
	}
	s.isolating = nil
	slices.SortFunc(others, func(a, b *pendingItem) int { return cmp.Compare(a.msg.Id, b.msg.Id) })
	var hung *hungError
	if errors.As(cause, &hung) {
		for _, pi := range others {
			s.outboxBytes += pi.size
		}
		s.outbox = append(others, s.outbox...)
	} else {
		s.suspects = append(s.suspects, others...)
	}
	s.inflight = nil
	s.timedOut = nil
	s.mu.Unlock()
	for _, r := range failed {
		s.emit(r)
	}
}

func (s *Session) failure(id uint64, msg string) Result {
	return Result{ID: id, Result: plugin.Result{Outcome: plugin.OutcomeFailed, Message: sanitizeMessage(msg)}}
}

// hungError reports a plugin that did not answer a cancelled item in time.
type hungError struct {
	timeout, grace time.Duration
}

func (e *hungError) Error() string {
	return fmt.Sprintf("an item timed out after %s and the plugin did not answer its cancellation within %s: plugin hung", e.timeout, e.grace)
}

// stream runs one Execute stream on p until every item has its result
// after CloseSend (nil), or until the stream breaks (the error).
func (s *Session) stream(p *proc) error {
	sctx, scancel := context.WithCancelCause(s.ctx)
	defer scancel(nil)
	ectx := sctx
	if s.b.velero {
		ectx = withVeleroBackup(sctx, veleroBackupOpts{raw: s.veleroBackup, location: s.veleroLocation})
	}
	st, err := p.stubs.Action.Execute(ectx, executeCodec)
	if err != nil {
		return fmt.Errorf("open Execute stream: %w", err)
	}
	start := &pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Start{Start: &pluginv1.ExecuteStart{Plugin: s.name, Backup: s.backup}}}
	if err := st.Send(start); err != nil {
		_, rerr := st.Recv()
		return fmt.Errorf("start Execute stream: %w", cmp.Or(rerr, err))
	}
	s.mu.Lock()
	s.gen++
	gen := s.gen
	s.inflight = nil
	s.timedOut = nil
	s.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { s.writer(sctx, st, gen) })
	wg.Go(func() { s.watchdog(sctx, scancel, gen) })
	err = s.reader(sctx, st, p, gen)
	scancel(err)
	wg.Wait()
	return err
}

func (s *Session) reader(sctx context.Context, st pluginv1.DeleteItemActionService_ExecuteClient, p *proc, gen uint64) error {
	var out []Result
	for {
		resp, err := st.Recv()
		if err != nil {
			if sctx.Err() != nil {
				return context.Cause(sctx)
			}
			if errors.Is(err, io.EOF) {
				s.mu.Lock()
				finished, n := s.closeSend && len(s.pending) == 0, len(s.pending)
				s.mu.Unlock()
				if finished {
					return nil
				}
				return fmt.Errorf("plugin ended the Execute stream with %d items unanswered", n)
			}
			return fmt.Errorf("receive on the Execute stream: %w", err)
		}
		out = out[:0]
		healthy, advance := false, false
		s.mu.Lock()
		for _, r := range resp.GetResults() {
			pi := s.pending[r.GetId()]
			if pi == nil || pi.gen != gen {
				continue // unknown, or already answered: never record twice
			}
			delete(s.pending, r.GetId())
			pi.done = true
			if pi == s.isolating {
				s.isolating, advance = nil, true
			}
			res := resultFromProto(r)
			healthy = healthy || res.Outcome != plugin.OutcomeFailed
			if !pi.timedOutAt.IsZero() && res.Outcome == plugin.OutcomeFailed {
				res.Message = fmt.Sprintf("timed out after %s: %s", s.timeout, res.Message)
			}
			out = append(out, res)
		}
		finished := s.closeSend && len(s.pending) == 0
		s.mu.Unlock()
		if healthy {
			s.b.progress(p) // only an answered item proves the process healthy
		}
		for _, r := range out {
			s.emit(r)
		}
		if finished || advance {
			s.signal()
		}
	}
}

// writer sends batches of the outbox, cancellations, and the half-close
// once every result is in. A batch goes when it is full, when the window
// is full, on CloseSend, or after Linger.
func (s *Session) writer(sctx context.Context, st pluginv1.DeleteItemActionService_ExecuteClient, gen uint64) {
	var (
		timer   *time.Timer
		timerC  <-chan time.Time
		expired bool
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		cancels := s.cancels
		s.cancels = nil
		n := len(s.outbox)
		finish := s.closeSend && len(s.pending) == 0
		ready := expired || n >= s.batch || s.closeSend || len(s.pending) >= s.window || s.outboxBytes >= maxBatchBytes
		var batch []*pluginv1.Item
		switch {
		case s.isolating != nil:
			// one suspect on the wire: nothing else goes until it is answered
		case len(s.suspects) > 0:
			pi := s.suspects[0]
			s.suspects[0] = nil
			s.suspects = s.suspects[1:]
			s.isolating = pi
			pi.gen = gen
			pi.sentAt = time.Now()
			s.inflight = append(s.inflight, pi)
			batch = append(batch, &pi.msg)
		case n > 0 && ready:
			now := time.Now()
			k, bytes := 0, 0
			for k < n && k < s.batch && (k == 0 || bytes+s.outbox[k].size <= maxBatchBytes) {
				pi := s.outbox[k]
				bytes += pi.size
				pi.gen = gen
				pi.sentAt = now
				s.inflight = append(s.inflight, pi)
				batch = append(batch, &pi.msg)
				s.outbox[k] = nil
				k++
			}
			s.outbox = s.outbox[k:]
			s.outboxBytes -= bytes
			n -= k
			expired = false
			timerC = nil
		}
		isolating := s.isolating != nil || len(s.suspects) > 0
		s.mu.Unlock()
		if len(cancels) > 0 {
			reason := fmt.Sprintf("timed out after %s", s.timeout)
			if err := st.Send(&pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Cancel{Cancel: &pluginv1.CancelItems{Ids: cancels, Reason: reason}}}); err != nil {
				return // the reader sees why
			}
		}
		if len(batch) > 0 {
			if err := st.Send(&pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Batch{Batch: &pluginv1.ItemBatch{Items: batch}}}); err != nil {
				return
			}
			continue
		}
		if finish {
			_ = st.CloseSend()
			return
		}
		if n > 0 && timerC == nil && !isolating {
			if timer == nil {
				timer = time.NewTimer(Linger)
			} else {
				timer.Reset(Linger)
			}
			timerC = timer.C
		}
		select {
		case <-s.notify:
		case <-timerC:
			expired = true
			timerC = nil
		case <-sctx.Done():
			return
		}
	}
}

// watchdog cancels items that exceed the timeout, and declares the plugin
// hung when a cancelled item gets no answer within the grace period.
func (s *Session) watchdog(sctx context.Context, scancel context.CancelCauseFunc, gen uint64) {
	tick := min(max(min(s.timeout, s.grace)/10, 5*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		var now time.Time
		select {
		case <-sctx.Done():
			return
		case now = <-t.C:
		}
		var cancels []uint64
		hung := false
		s.mu.Lock()
		for len(s.inflight) > 0 {
			pi := s.inflight[0]
			if !pi.done && pi.gen == gen {
				if now.Sub(pi.sentAt) < s.timeout {
					break
				}
				pi.timedOutAt = now
				cancels = append(cancels, pi.msg.Id)
				s.timedOut = append(s.timedOut, pi)
			}
			s.inflight[0] = nil
			s.inflight = s.inflight[1:]
		}
		s.timedOut = slices.DeleteFunc(s.timedOut, func(pi *pendingItem) bool { return pi.done || pi.gen != gen })
		for _, pi := range s.timedOut {
			if now.Sub(pi.timedOutAt) >= s.grace {
				hung = true
			}
		}
		s.cancels = append(s.cancels, cancels...)
		s.mu.Unlock()
		if len(cancels) > 0 {
			s.h.logger.Warn("items timed out; cancelling them", "plugin", s.name, "count", len(cancels), "timeout", s.timeout)
			s.h.count(s.name, 0, int64(len(cancels)))
			s.signal()
		}
		if hung {
			scancel(&hungError{timeout: s.timeout, grace: s.grace})
			return
		}
	}
}
