package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// This file is the plugin side of the protocol: it routes requests to the
// named plugins, runs Execute concurrently and hides the stream's batching.
// Every server method recovers from panics, so a bad plugin call fails one
// request or one item, never the process.

// served is one named plugin inside a binary.
type served struct {
	name    string
	version string
	action  DeleteItemAction
	max     int
	logger  hclog.Logger
	running *sync.WaitGroup // Execute calls in progress, binary-wide
}

// registry is the set of plugins a binary serves.
type registry struct {
	byName map[string]*served
	names  []string // sorted
	logger hclog.Logger
	// running counts the author's Execute calls in progress, which Serve
	// waits for, within a bound, before it returns.
	running sync.WaitGroup
}

func (r *registry) lookup(name string) (*served, error) {
	full, err := NormalizeName(name)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p, ok := r.byName[full]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "this binary does not serve plugin %q", full)
	}
	return p, nil
}

// recoverRPC turns a panic in a server method into an Internal error.
func recoverRPC(logger hclog.Logger, method string, err *error) {
	if v := recover(); v != nil {
		logger.Error("panic in plugin call", "method", method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "plugin panicked in %s: %v", method, v)
	}
}

type infoServer struct {
	pluginv1.UnimplementedPluginInfoServiceServer
	reg *registry
}

var _ pluginv1.PluginInfoServiceServer = (*infoServer)(nil)

func (s *infoServer) ListPlugins(context.Context, *pluginv1.ListPluginsRequest) (resp *pluginv1.ListPluginsResponse, err error) {
	defer recoverRPC(s.reg.logger, "ListPlugins", &err)
	resp = &pluginv1.ListPluginsResponse{}
	for _, n := range s.reg.names {
		p := s.reg.byName[n]
		resp.Plugins = append(resp.Plugins, &pluginv1.PluginDescriptor{
			Kind:           pluginv1.PluginKind_PLUGIN_KIND_DELETE_ITEM_ACTION,
			Name:           p.name,
			Version:        p.version,
			MaxConcurrency: uint32(p.max), //nolint:gosec // Serve refuses a negative MaxConcurrency
		})
	}
	return resp, nil
}

type actionServer struct {
	pluginv1.UnimplementedDeleteItemActionServiceServer
	reg *registry
	// fast is set on a server built by NewGRPCServer, whose codec
	// decodes batches into slots (see wireRequest).
	fast bool
}

var _ pluginv1.DeleteItemActionServiceServer = (*actionServer)(nil)

func (s *actionServer) AppliesTo(ctx context.Context, req *pluginv1.AppliesToRequest) (resp *pluginv1.AppliesToResponse, err error) {
	defer recoverRPC(s.reg.logger, "AppliesTo", &err)
	p, err := s.reg.lookup(req.GetPlugin())
	if err != nil {
		return nil, err
	}
	sel, err := p.action.AppliesTo(withLogger(ctx, p.logger))
	if err != nil {
		return nil, status.Errorf(codes.Unknown, "AppliesTo: %v", err)
	}
	if _, err := sel.Compile(); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "AppliesTo returned an invalid selector: %v", err)
	}
	return &pluginv1.AppliesToResponse{Selector: &pluginv1.ResourceSelector{
		IncludedNamespaces: sel.IncludedNamespaces,
		ExcludedNamespaces: sel.ExcludedNamespaces,
		IncludedResources:  sel.IncludedResources,
		ExcludedResources:  sel.ExcludedResources,
		LabelSelector:      sel.LabelSelector,
	}}, nil
}

func (s *actionServer) Execute(stream pluginv1.DeleteItemActionService_ExecuteServer) (err error) {
	defer recoverRPC(s.reg.logger, "Execute", &err)
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	start := req.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first Execute message must be ExecuteStart")
	}
	p, err := s.reg.lookup(start.GetPlugin())
	if err != nil {
		return err
	}
	ex := newExecution(stream.Context(), p, backupFromProto(start.GetBackup()))
	ex.fast = s.fast
	go ex.receive(stream)
	return ex.sendLoop(stream)
}

// execution runs one Execute stream: a receiver goroutine queues items, up
// to max workers run them, and the stream's handler goroutine sends the
// results that are ready, coalesced into one message.
type execution struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	p      *served
	backup Backup
	fast   bool // see actionServer.fast

	mu        sync.Mutex
	cond      *sync.Cond // workers wait on it for work
	queue     []*slot
	items     map[uint64]*slot // queued or running
	workers   int
	idle      int
	searching int // workers woken or spawned that have not looked for work yet
	inputDone bool
	results   []*slot
	wake      chan struct{} // cap 1: results are ready, or the input ended
}

// slot is everything one item needs on its way through an execution; the
// slots of a batch are allocated at once, and kept small: what only a few
// items need is in extra. A slot is never reused: the author may keep the
// input (but not its Item.Object: see recvPool).
type slot struct {
	id     uint64
	cancel context.CancelCauseFunc // set while running
	in     DeleteItemActionInput
	// buf holds in.Item.Object until the item is released.
	buf *recvBuf
	// outcome is the result; extra its message and retryAfter, if any.
	outcome pluginv1.Outcome
	extra   *slotExtra
}

type slotExtra struct {
	cancelled  string // set when cancelled while queued
	message    string
	retryAfter *durationpb.Duration
}

// release gives up the slot's reference to its batch's receive buffer,
// once the item is finished: Execute returned, or will never run.
func (sl *slot) release() {
	if sl.buf == nil {
		return
	}
	rb := sl.buf
	sl.buf, sl.in.Item.Object = nil, nil
	rb.release()
}

func (sl *slot) more() *slotExtra {
	if sl.extra == nil {
		sl.extra = &slotExtra{}
	}
	return sl.extra
}

func (sl *slot) message() string {
	if sl.extra == nil {
		return ""
	}
	return sl.extra.message
}

func (sl *slot) retryAfter() *durationpb.Duration {
	if sl.extra == nil {
		return nil
	}
	return sl.extra.retryAfter
}

// slotsFromProto makes the slots of items decoded by protobuf.
func slotsFromProto(items []*pluginv1.Item) []slot {
	slots := make([]slot, len(items))
	for i, it := range items {
		slots[i].id = it.GetId()
		slots[i].in.Item = itemFromProto(it)
	}
	return slots
}

func (sl *slot) result() *pluginv1.ItemResult {
	return &pluginv1.ItemResult{Id: sl.id, Outcome: sl.outcome, Message: sl.message(), RetryAfter: sl.retryAfter()}
}

func newExecution(parent context.Context, p *served, b Backup) *execution {
	ctx, cancel := context.WithCancelCause(withLogger(parent, p.logger))
	e := &execution{
		ctx:    ctx,
		cancel: cancel,
		p:      p,
		backup: b,
		items:  map[uint64]*slot{},
		wake:   make(chan struct{}, 1),
	}
	e.cond = sync.NewCond(&e.mu)
	context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.cond.Broadcast()
		e.mu.Unlock()
	})
	return e
}

func (e *execution) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// receive reads the client's messages until it half-closes or the stream
// breaks.
func (e *execution) receive(stream pluginv1.DeleteItemActionService_ExecuteServer) {
	defer func() {
		if v := recover(); v != nil {
			e.p.logger.Error("panic receiving items", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			e.cancel(fmt.Errorf("panic receiving items: %v", v))
		}
	}()
	pool := newRecvPool()
	for {
		var w wireRequest
		var err error
		if e.fast {
			w.pool = pool
			err = stream.RecvMsg(&w)
		} else {
			var req *pluginv1.ExecuteRequest
			if req, err = stream.Recv(); err == nil {
				w.req.Msg = req.Msg
			}
		}
		if errors.Is(err, io.EOF) {
			e.mu.Lock()
			e.inputDone = true
			e.cond.Broadcast()
			e.mu.Unlock()
			e.signal()
			return
		}
		if err != nil {
			e.cancel(err)
			return
		}
		if w.slots != nil {
			e.enqueue(w.slots)
			continue
		}
		switch m := w.req.GetMsg().(type) {
		case *pluginv1.ExecuteRequest_Batch:
			e.enqueue(slotsFromProto(m.Batch.GetItems()))
		case *pluginv1.ExecuteRequest_Cancel:
			e.cancelItems(m.Cancel.GetIds(), m.Cancel.GetReason())
		default:
			e.cancel(status.Errorf(codes.InvalidArgument, "unexpected Execute message %T", m))
			return
		}
	}
}

func (e *execution) enqueue(slots []slot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range slots {
		sl := &slots[i]
		if _, dup := e.items[sl.id]; dup {
			sl.release()
			continue // already queued or running; its one result is coming
		}
		e.items[sl.id] = sl
		e.queue = append(e.queue, sl)
	}
	e.wakeLH()
}

// wakeLH wakes or spawns one more worker if work is queued and no worker is
// already on its way to it. Each worker that takes an item calls it again,
// so concurrency grows one worker at a time while items queue up, up to
// max: instant items are served by few workers, slow ones by many.
func (e *execution) wakeLH() {
	if len(e.queue) == 0 || e.searching > 0 {
		return
	}
	switch {
	case e.idle > 0:
		e.searching++
		e.cond.Signal()
	case e.workers < e.p.max:
		e.searching++
		e.workers++
		go e.work()
	}
}

func (e *execution) cancelItems(ids []uint64, reason string) {
	if reason == "" {
		reason = "cancelled by the host"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		st, ok := e.items[id]
		if !ok {
			continue
		}
		if st.cancel != nil {
			st.cancel(errors.New(reason))
		} else {
			st.more().cancelled = reason
		}
	}
}

func (e *execution) work() {
	e.mu.Lock()
	defer func() {
		e.workers--
		e.mu.Unlock()
	}()
	e.searching-- // spawned by wakeLH
	for {
		for len(e.queue) == 0 && !e.inputDone && e.ctx.Err() == nil {
			e.idle++
			e.cond.Wait()
			e.idle--
			if e.searching > 0 {
				e.searching--
			}
		}
		if len(e.queue) == 0 || e.ctx.Err() != nil {
			return
		}
		sl := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.wakeLH()
		if sl.extra != nil && sl.extra.cancelled != "" {
			sl.outcome = pluginv1.Outcome_OUTCOME_FAILED
			sl.extra.message = "cancelled: " + oneLine(sl.extra.cancelled)
		} else {
			ctx, cancel := context.WithCancelCause(e.ctx)
			sl.cancel = cancel
			e.mu.Unlock()
			e.run(ctx, sl)
			cancel(nil)
			e.mu.Lock()
		}
		sl.release()
		delete(e.items, sl.id)
		e.results = append(e.results, sl)
		if len(e.results) == 1 || (e.inputDone && len(e.items) == 0) {
			e.signal()
		}
	}
}

// run calls the author's Execute for one item and writes its result in
// the slot; a panic fails the item.
func (e *execution) run(ctx context.Context, sl *slot) {
	defer func() {
		if v := recover(); v != nil {
			e.p.logger.Error("panic in Execute", "item", sl.in.Item.Resource+"/"+sl.in.Item.Name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			sl.outcome = pluginv1.Outcome_OUTCOME_FAILED
			sl.more().retryAfter = nil
			sl.extra.message = oneLine(fmt.Sprintf("plugin panicked: %v", v))
		}
	}()
	e.p.running.Add(1)
	defer e.p.running.Done()
	sl.in.Backup = e.backup
	r := Classify(e.p.action.Execute(ctx, &sl.in))
	if r.Message != "" {
		sl.more().message = oneLine(r.Message)
	}
	switch r.Outcome {
	case OutcomeDone:
		sl.outcome = pluginv1.Outcome_OUTCOME_DONE
	case OutcomeBlocked:
		sl.outcome = pluginv1.Outcome_OUTCOME_BLOCKED
		sl.more().retryAfter = durationpb.New(r.RetryAfter)
	case OutcomeSkipped:
		sl.outcome = pluginv1.Outcome_OUTCOME_SKIPPED
	default:
		sl.outcome = pluginv1.Outcome_OUTCOME_FAILED
	}
}

// sendLoop sends results as they become ready, coalescing whatever is ready
// into one message, and returns when the input has ended and every item has
// its result, or when the stream breaks.
func (e *execution) sendLoop(stream pluginv1.DeleteItemActionService_ExecuteServer) error {
	defer e.cancel(context.Canceled)
	for {
		select {
		case <-e.wake:
		case <-e.ctx.Done():
			return context.Cause(e.ctx)
		}
		e.mu.Lock()
		batch := e.results
		e.results = nil // gRPC may read a sent message lazily: never reuse it
		done := e.inputDone && len(e.items) == 0
		e.mu.Unlock()
		if len(batch) > 0 {
			if err := e.send(stream, batch); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
	}
}

func itemFromProto(it *pluginv1.Item) Item {
	return Item{
		Group:     it.GetGroup(),
		Version:   it.GetVersion(),
		Resource:  it.GetResource(),
		Kind:      it.GetKind(),
		Namespace: it.GetNamespace(),
		Name:      it.GetName(),
		Object:    it.GetObject(),
	}
}

func backupFromProto(b *pluginv1.Backup) Backup {
	out := Backup{
		Name:            b.GetName(),
		UID:             b.GetUid(),
		Labels:          b.GetLabels(),
		Annotations:     b.GetAnnotations(),
		StorageLocation: b.GetStorageLocation(),
		SourceUID:       b.GetSourceUid(),
	}
	if b.GetCreatedAt() != nil {
		out.CreatedAt = b.GetCreatedAt().AsTime()
	}
	if b.GetSourceCreatedAt() != nil {
		out.SourceCreatedAt = b.GetSourceCreatedAt().AsTime()
	}
	if b.GetExpiresAt() != nil {
		out.ExpiresAt = b.GetExpiresAt().AsTime()
	}
	return out
}

// send sends the results of the slots in one message.
func (e *execution) send(stream pluginv1.DeleteItemActionService_ExecuteServer, slots []*slot) error {
	if e.fast {
		return stream.SendMsg(&wireResponse{slots: slots})
	}
	results := make([]*pluginv1.ItemResult, len(slots))
	for i, sl := range slots {
		results[i] = sl.result()
	}
	return stream.Send(&pluginv1.ExecuteResponse{Results: results})
}
