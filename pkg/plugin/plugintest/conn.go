package plugintest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lethehq/lethe/pkg/plugin"
	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// BatchSizeDefault is how many items Conn.Run sends per stream message.
const BatchSizeDefault = 64

// Conn speaks Lethe's plugin protocol to a plugin server, like the host
// does: in memory (Serve) or to a started binary (Start).
type Conn struct {
	// Stubs are the generated clients of both services, for calls Conn has
	// no helper for.
	Stubs *plugin.Client
	// BatchSize is how many items Run sends per ItemBatch message (default
	// BatchSizeDefault).
	BatchSize int
	// Backup is the backup Run sends in the stream's start message.
	Backup plugin.Backup
}

// Serve serves plugins through the SDK's real gRPC server, in memory, and
// returns a Conn to it: every call goes through protobuf encoding, the
// Execute stream, batching, ids and the SDK's worker pool, without a
// subprocess. Plugin logs (plugin.Logger) go to the test log. Everything
// is stopped when the test ends.
func Serve(t testing.TB, plugins ...*plugin.Plugin) *Conn {
	t.Helper()
	gp, err := plugin.GRPCPlugin(testLogger(t), plugins...)
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	grpcPlugin, ok := gp.(goplugin.GRPCPlugin)
	if !ok {
		t.Fatalf("plugintest: plugin.GRPCPlugin returned %T, not a go-plugin GRPCPlugin", gp)
	}
	return serveConn(t, func(s *grpc.Server) error { return grpcPlugin.GRPCServer(nil, s) })
}

// ServeServers serves hand-written protocol servers in memory, for testing
// a plugin that does not use the SDK's Serve, or a host-side tool.
func ServeServers(t testing.TB, info pluginv1.PluginInfoServiceServer, action pluginv1.DeleteItemActionServiceServer) *Conn {
	t.Helper()
	return serveConn(t, func(s *grpc.Server) error {
		pluginv1.RegisterPluginInfoServiceServer(s, info)
		pluginv1.RegisterDeleteItemActionServiceServer(s, action)
		return nil
	})
}

func serveConn(t testing.TB, register func(*grpc.Server) error) *Conn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := plugin.NewGRPCServer(nil)
	if err := register(srv); err != nil {
		t.Fatalf("plugintest: register gRPC servers: %v", err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	cc, err := grpc.NewClient("passthrough:///plugintest",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(plugin.MaxMessageSize),
			grpc.MaxCallSendMsgSize(plugin.MaxMessageSize),
		),
	)
	if err != nil {
		srv.Stop()
		t.Fatalf("plugintest: dial in-memory server: %v", err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
		<-served
	})
	return newConn(cc)
}

func newConn(cc grpc.ClientConnInterface) *Conn {
	return &Conn{Stubs: &plugin.Client{
		Info:   pluginv1.NewPluginInfoServiceClient(cc),
		Action: pluginv1.NewDeleteItemActionServiceClient(cc),
	}}
}

// ListPlugins lists the plugins the server serves.
func (c *Conn) ListPlugins(ctx context.Context) ([]*pluginv1.PluginDescriptor, error) {
	resp, err := c.Stubs.Info.ListPlugins(ctx, &pluginv1.ListPluginsRequest{})
	if err != nil {
		return nil, err
	}
	return resp.GetPlugins(), nil
}

// AppliesTo returns the named plugin's selector.
func (c *Conn) AppliesTo(ctx context.Context, name string) (plugin.ResourceSelector, error) {
	resp, err := c.Stubs.Action.AppliesTo(ctx, &pluginv1.AppliesToRequest{Plugin: name})
	if err != nil {
		return plugin.ResourceSelector{}, err
	}
	s := resp.GetSelector()
	return plugin.ResourceSelector{
		IncludedNamespaces: s.GetIncludedNamespaces(),
		ExcludedNamespaces: s.GetExcludedNamespaces(),
		IncludedResources:  s.GetIncludedResources(),
		ExcludedResources:  s.GetExcludedResources(),
		LabelSelector:      s.GetLabelSelector(),
	}, nil
}

// Run does what the host does for one plugin: it calls AppliesTo, matches
// the items against the selector, sends the selected ones on one Execute
// stream in batches of BatchSize, half-closes, and waits for every result.
// It returns one ItemResult per item, in the order given, and fails the
// test on any error or protocol violation (a missing, duplicate or unknown
// result id, an unknown outcome).
func (c *Conn) Run(t testing.TB, name string, items ...plugin.Item) []ItemResult {
	t.Helper()
	ctx := t.Context()
	sel, err := c.AppliesTo(ctx, name)
	if err != nil {
		t.Fatalf("plugintest: AppliesTo(%q): %v", name, err)
	}
	m, err := sel.Compile()
	if err != nil {
		t.Fatalf("plugintest: plugin %q returned an invalid selector: %v", name, err)
	}
	out := make([]ItemResult, len(items))
	var selected []plugin.Item
	var index []int
	for i, it := range items {
		out[i].Item = it
		if m.Matches(it, Labels(it)) {
			out[i].Selected = true
			selected = append(selected, it)
			index = append(index, i)
		}
	}
	s, err := c.OpenStream(ctx, name, c.Backup)
	if err != nil {
		t.Fatalf("plugintest: Execute(%q): %v", name, err)
	}
	batch := cmp.Or(c.BatchSize, BatchSizeDefault)
	ids := make([]uint64, 0, len(selected))
	sendErr := make(chan error, 1)
	var idsMu sync.Mutex
	go func() {
		for chunk := range chunks(selected, batch) {
			got, err := s.Send(chunk...)
			if err != nil {
				sendErr <- err
				return
			}
			idsMu.Lock()
			ids = append(ids, got...)
			idsMu.Unlock()
		}
		sendErr <- s.CloseSend()
	}()
	results, err := s.collect()
	if serr := <-sendErr; serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		t.Fatalf("plugintest: Execute(%q): %v", name, err)
	}
	for k, id := range ids {
		out[index[k]].Result = results[id]
	}
	return out
}

func chunks[T any](s []T, n int) func(func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

// Result is the result of one item id on a Stream.
type Result struct {
	ID uint64
	plugin.Result
}

// Stream is one Execute stream, for tests that drive the protocol step by
// step: send batches, cancel items, receive results. Send, Cancel and
// CloseSend may be called from one goroutine while Recv or Wait runs in
// another.
type Stream struct {
	s pluginv1.DeleteItemActionService_ExecuteClient

	sendMu sync.Mutex
	nextID uint64

	mu      sync.Mutex
	pending map[uint64]bool // sent, no result yet
	done    map[uint64]bool // result received
}

// OpenStream opens an Execute stream to the named plugin and sends the
// start message.
func (c *Conn) OpenStream(ctx context.Context, name string, b plugin.Backup) (*Stream, error) {
	es, err := c.Stubs.Action.Execute(ctx)
	if err != nil {
		return nil, err
	}
	start := &pluginv1.ExecuteStart{Plugin: name, Backup: backupToProto(b)}
	if err := es.Send(&pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Start{Start: start}}); err != nil {
		return nil, sendError(es, err)
	}
	return &Stream{s: es, pending: map[uint64]bool{}, done: map[uint64]bool{}}, nil
}

// Send sends the items as one batch and returns their ids, numbered from 1
// in the order sent.
func (s *Stream) Send(items ...plugin.Item) ([]uint64, error) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	batch := &pluginv1.ItemBatch{Items: make([]*pluginv1.Item, len(items))}
	ids := make([]uint64, len(items))
	s.mu.Lock()
	for i, it := range items {
		s.nextID++
		ids[i] = s.nextID
		s.pending[s.nextID] = true
		batch.Items[i] = &pluginv1.Item{
			Id: s.nextID, Group: it.Group, Version: it.Version, Resource: it.Resource, Kind: it.Kind,
			Namespace: it.Namespace, Name: it.Name, Object: it.Object,
		}
	}
	s.mu.Unlock()
	if err := s.s.Send(&pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Batch{Batch: batch}}); err != nil {
		return nil, sendError(s.s, err)
	}
	return ids, nil
}

// Cancel asks the plugin to cancel items still in flight. Each still gets
// exactly one result.
func (s *Stream) Cancel(reason string, ids ...uint64) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	msg := &pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Cancel{Cancel: &pluginv1.CancelItems{Ids: ids, Reason: reason}}}
	if err := s.s.Send(msg); err != nil {
		return sendError(s.s, err)
	}
	return nil
}

// CloseSend half-closes the stream: no more items. The plugin finishes the
// items in flight, sends their results and closes.
func (s *Stream) CloseSend() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.s.CloseSend()
}

// Recv returns the results of the next response message. It returns io.EOF
// when the plugin has closed the stream cleanly, and an error for a
// protocol violation: a result for an id never sent or already answered,
// or an unknown outcome.
func (s *Stream) Recv() ([]Result, error) {
	resp, err := s.s.Recv()
	if err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(resp.GetResults()))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range resp.GetResults() {
		id := r.GetId()
		switch {
		case s.done[id]:
			return nil, fmt.Errorf("protocol violation: a second result for item id %d", id)
		case !s.pending[id]:
			return nil, fmt.Errorf("protocol violation: a result for item id %d, which was never sent", id)
		}
		res, err := resultFromProto(r)
		if err != nil {
			return nil, fmt.Errorf("protocol violation: item id %d: %w", id, err)
		}
		delete(s.pending, id)
		s.done[id] = true
		out = append(out, Result{ID: id, Result: res})
	}
	return out, nil
}

// Wait half-closes the stream, receives until the plugin closes it, and
// returns every result by id. It fails when the stream ends with an error,
// or when an item sent got no result.
func (s *Stream) Wait() (map[uint64]plugin.Result, error) {
	if err := s.CloseSend(); err != nil {
		return nil, err
	}
	return s.collect()
}

func (s *Stream) collect() (map[uint64]plugin.Result, error) {
	out := map[uint64]plugin.Result{}
	for {
		rs, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, err
		}
		for _, r := range rs {
			out[r.ID] = r.Result
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.pending); n > 0 {
		return out, fmt.Errorf("protocol violation: the plugin closed the stream with %d item(s) unanswered", n)
	}
	return out, nil
}

// sendError returns the stream's real status when Send reports io.EOF,
// which gRPC does when the server has already ended the stream.
func sendError(s pluginv1.DeleteItemActionService_ExecuteClient, err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if _, rerr := s.Recv(); rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return errors.New("the plugin closed the stream early")
			}
			return rerr
		}
	}
}

func resultFromProto(r *pluginv1.ItemResult) (plugin.Result, error) {
	res := plugin.Result{Message: r.GetMessage()}
	switch r.GetOutcome() {
	case pluginv1.Outcome_OUTCOME_DONE:
		res.Outcome = plugin.OutcomeDone
	case pluginv1.Outcome_OUTCOME_BLOCKED:
		res.Outcome = plugin.OutcomeBlocked
		if d := r.GetRetryAfter(); d != nil {
			if err := d.CheckValid(); err != nil {
				return res, fmt.Errorf("retry_after: %w", err)
			}
			res.RetryAfter = d.AsDuration()
		}
		if res.RetryAfter < 0 {
			return res, fmt.Errorf("negative retry_after %s", res.RetryAfter)
		}
	case pluginv1.Outcome_OUTCOME_FAILED:
		res.Outcome = plugin.OutcomeFailed
	case pluginv1.Outcome_OUTCOME_SKIPPED:
		res.Outcome = plugin.OutcomeSkipped
	default:
		return res, fmt.Errorf("unknown outcome %s", r.GetOutcome())
	}
	if strings.ContainsAny(res.Message, "\r\n") {
		return res, fmt.Errorf("message is not one line: %q", res.Message)
	}
	return res, nil
}

func backupToProto(b plugin.Backup) *pluginv1.Backup {
	out := &pluginv1.Backup{
		Name: b.Name, Uid: b.UID, Labels: b.Labels, Annotations: b.Annotations,
		StorageLocation: b.StorageLocation, SourceUid: b.SourceUID,
	}
	if !b.CreatedAt.IsZero() {
		out.CreatedAt = timestamppb.New(b.CreatedAt)
	}
	if !b.SourceCreatedAt.IsZero() {
		out.SourceCreatedAt = timestamppb.New(b.SourceCreatedAt)
	}
	if !b.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(b.ExpiresAt)
	}
	return out
}

// testLogger logs to the test's log until the test ends, then drops lines:
// a plugin goroutine may log after the test returns.
func testLogger(t testing.TB) hclog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: w, Level: hclog.Debug})
}

type testWriter struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
