package pluginhost

// This file runs unmodified Velero DeleteItemAction plugins: binaries built
// with Velero's pkg/plugin/framework, which speak go-plugin with the
// handshake VELERO_PLUGIN=hello, protocol version 2, and the gRPC services
// PluginLister and DeleteItemAction of proto package "generated" (Lethe's
// own wire-compatible copy: proto/velero/generated).
//
// A Velero binary is a binary like any other for the host: the same
// discovery, minimal environment, lock file and sealed image, process
// group, restarts, timeouts and redelivery. Only the wire differs, and
// veleroClient hides it behind the Lethe stubs the rest of the host uses:
// ListPlugins and AppliesTo are translated, and the Execute stream is
// served locally by one unary Velero Execute call per item, carrying the
// item's JSON and the backup as a velero.io/v1 Backup JSON. Velero's
// protocol has no blocked or skipped outcome: an error is a failed item.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/pkg/plugin"
	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
	"github.com/lethehq/lethe/proto/velero/generated"
)

// VeleroProtocolVersion is the go-plugin protocol version of Velero's
// plugin framework.
const VeleroProtocolVersion = 2

// Protocols of Info.Protocol.
const (
	ProtocolLethe  = "lethe"
	ProtocolVelero = "velero"
)

// veleroHandshake is Velero's (pkg/plugin/framework/handshake.go).
var veleroHandshake = goplugin.HandshakeConfig{
	ProtocolVersion:  VeleroProtocolVersion,
	MagicCookieKey:   "VELERO_PLUGIN",
	MagicCookieValue: "hello",
}

// veleroPluginSetKey is the key the host dispenses from a Velero binary;
// on gRPC the server's plugin names are not checked, and every service is
// on the one connection.
const veleroPluginSetKey = "velero"

// veleroKindDeleteItemAction is the PluginLister kind of DeleteItemAction
// plugins.
const veleroKindDeleteItemAction = "DeleteItemAction"

// VeleroMaxConcurrency is how many items a Velero plugin gets at once.
// Velero itself calls a DeleteItemAction one item at a time, and its
// plugins may rely on it.
const VeleroMaxConcurrency = 1

func veleroPlugins() map[int]goplugin.PluginSet {
	return map[int]goplugin.PluginSet{VeleroProtocolVersion: {veleroPluginSetKey: &veleroGRPCPlugin{}}}
}

// veleroGRPCPlugin builds the host side only.
type veleroGRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (*veleroGRPCPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error {
	return errors.New("pluginhost: Lethe does not serve Velero plugins")
}

func (*veleroGRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	vc := &veleroClient{lister: generated.NewPluginListerClient(cc), action: generated.NewDeleteItemActionClient(cc)}
	return &plugin.Client{Info: vc, Action: vc}, nil
}

// veleroClient serves Lethe's stubs over Velero's services.
type veleroClient struct {
	lister generated.PluginListerClient
	action generated.DeleteItemActionClient
}

var (
	_ pluginv1.PluginInfoServiceClient       = (*veleroClient)(nil)
	_ pluginv1.DeleteItemActionServiceClient = (*veleroClient)(nil)
)

// ListPlugins lists the binary's DeleteItemAction plugins; its other
// kinds (ObjectStore, BackupItemAction, ...) are not Lethe's business.
func (c *veleroClient) ListPlugins(ctx context.Context, _ *pluginv1.ListPluginsRequest, opts ...grpc.CallOption) (*pluginv1.ListPluginsResponse, error) {
	resp, err := c.lister.ListPlugins(ctx, &generated.Empty{}, opts...)
	if err != nil {
		return nil, err
	}
	out := &pluginv1.ListPluginsResponse{}
	for _, id := range resp.GetPlugins() {
		if id.GetKind() != veleroKindDeleteItemAction {
			continue
		}
		out.Plugins = append(out.Plugins, &pluginv1.PluginDescriptor{
			Kind: pluginv1.PluginKind_PLUGIN_KIND_DELETE_ITEM_ACTION, Name: id.GetName(),
			MaxConcurrency: VeleroMaxConcurrency,
		})
	}
	return out, nil
}

func (c *veleroClient) AppliesTo(ctx context.Context, in *pluginv1.AppliesToRequest, opts ...grpc.CallOption) (*pluginv1.AppliesToResponse, error) {
	resp, err := c.action.AppliesTo(ctx, &generated.DeleteItemActionAppliesToRequest{Plugin: in.GetPlugin()}, opts...)
	if err != nil {
		return nil, err
	}
	s := resp.GetResourceSelector()
	return &pluginv1.AppliesToResponse{Selector: &pluginv1.ResourceSelector{
		IncludedNamespaces: s.GetIncludedNamespaces(),
		ExcludedNamespaces: s.GetExcludedNamespaces(),
		IncludedResources:  s.GetIncludedResources(),
		ExcludedResources:  s.GetExcludedResources(),
		LabelSelector:      s.GetSelector(),
	}}, nil
}

// Execute opens a local stream that turns Lethe's batches into Velero's
// unary calls.
func (c *veleroClient) Execute(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[pluginv1.ExecuteRequest, pluginv1.ExecuteResponse], error) {
	sctx, cancel := context.WithCancelCause(ctx)
	vb, _ := ctx.Value(veleroBackupKey{}).(veleroBackupOpts)
	s := &veleroStream{
		c: c, ctx: sctx, cancel: cancel, raw: vb.raw, location: vb.location,
		work: make(chan *pluginv1.Item, 1<<16), results: make(chan *pluginv1.ItemResult, 1<<10),
		cancels: map[uint64]context.CancelCauseFunc{}, closedSend: make(chan struct{}),
	}
	return s, nil
}

// veleroStream is the Execute stream of one session on a Velero binary.
type veleroStream struct {
	c      *veleroClient
	ctx    context.Context
	cancel context.CancelCauseFunc

	once   sync.Once
	plugin string
	backup []byte
	// raw is the backup's own velero-backup.json, sent as it is when set
	// (SessionOptions.VeleroBackup).
	raw []byte
	// location names the backup's storage location for the Backup built
	// when raw is nil (SessionOptions.VeleroLocation).
	location string
	work     chan *pluginv1.Item
	results  chan *pluginv1.ItemResult
	wg       sync.WaitGroup

	mu         sync.Mutex
	cancels    map[uint64]context.CancelCauseFunc
	closeSend  bool
	closedSend chan struct{} // closed by CloseSend
	pending    int
}

func (s *veleroStream) Send(m *pluginv1.ExecuteRequest) error {
	if err := s.ctx.Err(); err != nil {
		return io.EOF // as gRPC: the reader sees why
	}
	switch msg := m.GetMsg().(type) {
	case *pluginv1.ExecuteRequest_Start:
		b := s.raw
		if b == nil {
			var err error
			if b, err = veleroBackupJSON(msg.Start.GetBackup(), s.location); err != nil {
				return err
			}
		}
		s.plugin, s.backup = msg.Start.GetPlugin(), b
		s.once.Do(func() {
			for range VeleroMaxConcurrency {
				s.wg.Go(s.worker)
			}
		})
	case *pluginv1.ExecuteRequest_Batch:
		s.mu.Lock()
		s.pending += len(msg.Batch.GetItems())
		s.mu.Unlock()
		for _, it := range msg.Batch.GetItems() {
			select {
			case s.work <- it:
			case <-s.ctx.Done():
				return io.EOF
			}
		}
	case *pluginv1.ExecuteRequest_Cancel:
		s.mu.Lock()
		for _, id := range msg.Cancel.GetIds() {
			if c := s.cancels[id]; c != nil {
				c(errors.New(msg.Cancel.GetReason()))
			}
		}
		s.mu.Unlock()
	}
	return nil
}

func (s *veleroStream) worker() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case it := <-s.work:
			ictx, icancel := context.WithCancelCause(s.ctx)
			s.mu.Lock()
			s.cancels[it.GetId()] = icancel
			s.mu.Unlock()
			_, err := s.c.action.Execute(ictx, &generated.DeleteItemActionExecuteRequest{
				Plugin: s.plugin, Item: it.GetObject(), Backup: s.backup,
			})
			cause := context.Cause(ictx)
			icancel(nil)
			s.mu.Lock()
			delete(s.cancels, it.GetId())
			s.mu.Unlock()
			r := &pluginv1.ItemResult{Id: it.GetId(), Outcome: pluginv1.Outcome_OUTCOME_DONE}
			if err != nil {
				st := status.Convert(err)
				switch {
				case s.ctx.Err() != nil:
					return
				case cause != nil && ictx.Err() != nil:
					// Cancelled by the host for its timeout: an answer.
					r.Outcome, r.Message = pluginv1.Outcome_OUTCOME_FAILED, cause.Error()
				case st.Code() == codes.Unavailable || st.Code() == codes.Canceled:
					// The process died or the connection broke: the stream
					// breaks, and the session restarts the plugin and
					// redelivers what was in flight.
					s.cancel(fmt.Errorf("velero plugin call failed: %w", err))
					return
				default:
					r.Outcome, r.Message = pluginv1.Outcome_OUTCOME_FAILED, st.Message()
				}
			}
			select {
			case s.results <- r:
			case <-s.ctx.Done():
				return
			}
		}
	}
}

// Recv returns the results ready (at least one), io.EOF once CloseSend
// was called and every item is answered, or why the stream broke.
func (s *veleroStream) Recv() (*pluginv1.ExecuteResponse, error) {
	closed := s.closedSend
	for {
		s.mu.Lock()
		done := s.closeSend && s.pending == 0
		s.mu.Unlock()
		if done {
			return nil, io.EOF
		}
		select {
		case first := <-s.results:
			out := &pluginv1.ExecuteResponse{Results: []*pluginv1.ItemResult{first}}
			for more := true; more; {
				select {
				case r := <-s.results:
					out.Results = append(out.Results, r)
				default:
					more = false
				}
			}
			s.mu.Lock()
			s.pending -= len(out.Results)
			s.mu.Unlock()
			return out, nil
		case <-closed:
			closed = nil // look again whether every item is answered
		case <-s.ctx.Done():
			return nil, status.FromContextError(context.Cause(s.ctx)).Err()
		}
	}
}

// CloseSend says no more items come; Recv ends with io.EOF once every
// item is answered.
func (s *veleroStream) CloseSend() error {
	s.mu.Lock()
	if !s.closeSend {
		s.closeSend = true
		close(s.closedSend)
	}
	s.mu.Unlock()
	return nil
}

func (s *veleroStream) Header() (metadata.MD, error) { return nil, nil }
func (s *veleroStream) Trailer() metadata.MD         { return nil }
func (s *veleroStream) Context() context.Context     { return s.ctx }
func (s *veleroStream) SendMsg(m any) error {
	req, ok := m.(*pluginv1.ExecuteRequest)
	if !ok {
		return fmt.Errorf("pluginhost: unexpected message %T", m)
	}
	return s.Send(req)
}
func (s *veleroStream) RecvMsg(m any) error {
	resp, err := s.Recv()
	if err != nil {
		return err
	}
	out, ok := m.(*pluginv1.ExecuteResponse)
	if !ok {
		return fmt.Errorf("pluginhost: unexpected message %T", m)
	}
	out.Results = resp.Results
	return nil
}

// veleroBackupKey carries SessionOptions.VeleroBackup and VeleroLocation
// from a session to the Execute stream it opens on a Velero binary.
type veleroBackupKey struct{}

type veleroBackupOpts struct {
	raw      []byte
	location string
}

func withVeleroBackup(ctx context.Context, o veleroBackupOpts) context.Context {
	return context.WithValue(ctx, veleroBackupKey{}, o)
}

// veleroBackupJSON builds the velero.io/v1 Backup a Velero plugin gets
// when the backup has no velero-backup.json of its own, from the source
// system's identity when known (source_uid, source_created_at).
// Its spec.storageLocation is the name of Velero's storage location when
// the backup came from a Velero bucket (the velero.io/storage-location
// label Velero sets), else location, the name of Lethe's location that
// holds it: a name, as Velero's BackupStorageLocation, never a URL.
func veleroBackupJSON(b *pluginv1.Backup, location string) ([]byte, error) {
	loc := location
	if l := b.GetLabels()["velero.io/storage-location"]; l != "" {
		loc = l
	}
	in := velero.PluginBackup{
		Name: b.GetName(), UID: cmp.Or(b.GetSourceUid(), b.GetUid()), Labels: b.GetLabels(), Annotations: b.GetAnnotations(),
		StorageLocation: loc,
	}
	if t := cmp.Or(b.GetSourceCreatedAt(), b.GetCreatedAt()); t != nil {
		in.CreatedAt = t.AsTime()
	}
	if t := b.GetExpiresAt(); t != nil {
		in.ExpiresAt = t.AsTime()
	}
	return velero.BackupJSON(in)
}

// veleroDir is what New found in Config.VeleroDir.
type veleroDir struct {
	entries   []binEntry
	installed []binEntry // entries and the refused ones, for PluginEnv's check
	problems  []Problem
	lock      *Lock
}

// listVelero lists Config.VeleroDir and reads its lock file, with the
// rules of the Lethe plugin folder: an untrusted folder or lock file, a
// file that is not executable, or a locked binary that is absent fails
// New; a binary refused on its own is a Problem.
func (h *Host) listVelero() (*veleroDir, error) {
	c := h.cfg
	v := &veleroDir{}
	if c.VeleroDir == "" {
		return v, nil
	}
	var err error
	if v.lock, err = ReadLock(c.VeleroLockFile); err != nil {
		return nil, err
	}
	if v.entries, v.problems, err = listBinaries(c.VeleroDir, c.VeleroLockFile); err != nil {
		return nil, fmt.Errorf("the Velero plugin folder: %w", err)
	}
	// Pinning is all or nothing: with Lethe's plugins pinned, deleting
	// this lock file must not let the Velero binaries run unpinned.
	if v.lock == nil && c.RequireLock && len(v.entries)+len(v.problems) > 0 {
		return nil, fmt.Errorf("plugin lock file %s does not exist, and a lock is required: pin the Velero plugins with `lethe plugin lock` first", Quote(c.VeleroLockFile))
	}
	if v.lock == nil && h.lock != nil && len(v.entries)+len(v.problems) > 0 {
		return nil, fmt.Errorf("plugin lock file %s of the Velero plugins does not exist, while %s pins Lethe's plugins: every plugin is pinned or none; pin them all with `lethe plugin lock`", Quote(c.VeleroLockFile), Quote(c.LockFile))
	}
	v.installed = append(v.installed, v.entries...)
	for _, p := range v.problems {
		v.installed = append(v.installed, binEntry{path: p.Binary, exe: p.Binary})
	}
	if v.lock != nil {
		present := map[string]bool{}
		for _, be := range v.installed {
			present[be.name()] = true
		}
		var missing []string
		for name := range v.lock.Plugins {
			if !present[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return nil, &LockedBinaryMissingError{Name: missing[0], More: missing[1:], Dir: c.VeleroDir, Lock: c.VeleroLockFile}
		}
	}
	return v, nil
}

// veleroBinaries are the Velero binaries to start, with their minimal
// environment and lock file checksum; one the lock file does not pin is
// a Problem.
func (h *Host) veleroBinaries(v *veleroDir) []*binary {
	var bins []*binary
	for _, be := range v.entries {
		b := &binary{h: h, path: be.path, exe: be.exe, display: be.name(), tail: newTail(h.cfg.StderrTailLines), velero: true}
		b.env = baseEnv(h.cfg.PluginEnv[be.name()], h.user.home())
		if v.lock != nil {
			e, ok := v.lock.Plugins[be.name()]
			if !ok {
				h.problems = append(h.problems, Problem{Binary: be.path, Err: &UnpinnedError{Binary: be.path, Lock: h.cfg.VeleroLockFile, Velero: true}})
				continue
			}
			b.checksum = e.SHA256
		}
		bins = append(bins, b)
	}
	return bins
}
