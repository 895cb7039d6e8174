package plugin

import (
	"context"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// ProtocolVersion is the plugin protocol version this SDK speaks. The host
// and the plugin negotiate it during the go-plugin handshake; a plugin that
// speaks no version the host knows is refused.
const ProtocolVersion = 1

// PluginSetKey is the key of Lethe's plugin in go-plugin's PluginSet. One
// key serves every named plugin of a binary: requests name the plugin.
const PluginSetKey = "lethe"

// MaxMessageSize caps one gRPC message on the plugin connection, both ways.
// The host keeps its batches far below it.
const MaxMessageSize = 64 << 20

// Handshake is the go-plugin handshake shared by the host and plugins. It is
// not a security measure: it only stops a plugin binary from being run by
// hand, or by the wrong host.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "LETHE_PLUGIN",
	MagicCookieValue: "a7c4f1d2-lethe-plugin",
}

// VersionedPlugins returns the go-plugin plugin sets keyed by protocol
// version, for the host side (a ClientConfig). The GRPCClient of each set
// returns a *Client.
func VersionedPlugins() map[int]goplugin.PluginSet {
	return map[int]goplugin.PluginSet{
		ProtocolVersion: {PluginSetKey: &grpcPlugin{}},
	}
}

// Client is what the host gets when it dispenses PluginSetKey from a
// go-plugin client: the generated gRPC stubs of both services, on one
// connection.
type Client struct {
	Info   pluginv1.PluginInfoServiceClient
	Action pluginv1.DeleteItemActionServiceClient
}

// grpcPlugin is the go-plugin glue. On the plugin side it carries the
// servers; on the host side it only builds a Client.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	reg    *registry // nil on the host side
	info   pluginv1.PluginInfoServiceServer
	action pluginv1.DeleteItemActionServiceServer
}

var (
	_ goplugin.Plugin     = (*grpcPlugin)(nil)
	_ goplugin.GRPCPlugin = (*grpcPlugin)(nil)
)

func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pluginv1.RegisterPluginInfoServiceServer(s, p.info)
	action := p.action
	if a, ok := action.(*actionServer); ok {
		if _, fast := fastServers.Load(s); fast {
			action = &actionServer{reg: a.reg, fast: true}
		}
	}
	pluginv1.RegisterDeleteItemActionServiceServer(s, action)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{
		Info:   pluginv1.NewPluginInfoServiceClient(c),
		Action: pluginv1.NewDeleteItemActionServiceClient(c),
	}, nil
}

// wait waits up to d for the Execute calls in progress to return.
func (p *grpcPlugin) wait(d time.Duration) {
	done := make(chan struct{})
	go func() {
		p.reg.running.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
