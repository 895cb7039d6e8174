package main

import (
	"context"
	"strings"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/lethehq/lethe/pkg/plugin"
	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// serveRaw serves names and version as they are, without the SDK's
// checks, and without TLS: it stands for a plugin not built with the SDK,
// to test what the host itself refuses. The host must run it with
// Config.DisableAutoMTLS.
func serveRaw(names, version string) {
	p := &rawPlugin{names: strings.Split(names, ","), version: version}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  plugin.Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{plugin.ProtocolVersion: {plugin.PluginSetKey: p}},
		GRPCServer:       plugin.NewGRPCServer,
	})
}

type rawPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	pluginv1.UnimplementedPluginInfoServiceServer
	pluginv1.UnimplementedDeleteItemActionServiceServer
	names   []string
	version string
}

func (p *rawPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pluginv1.RegisterPluginInfoServiceServer(s, p)
	pluginv1.RegisterDeleteItemActionServiceServer(s, p)
	return nil
}

func (p *rawPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}

func (p *rawPlugin) ListPlugins(context.Context, *pluginv1.ListPluginsRequest) (*pluginv1.ListPluginsResponse, error) {
	resp := &pluginv1.ListPluginsResponse{}
	for _, n := range p.names {
		resp.Plugins = append(resp.Plugins, &pluginv1.PluginDescriptor{
			Kind: pluginv1.PluginKind_PLUGIN_KIND_DELETE_ITEM_ACTION, Name: n, Version: p.version, MaxConcurrency: 1,
		})
	}
	return resp, nil
}

func (p *rawPlugin) AppliesTo(context.Context, *pluginv1.AppliesToRequest) (*pluginv1.AppliesToResponse, error) {
	return &pluginv1.AppliesToResponse{Selector: &pluginv1.ResourceSelector{}}, nil
}
