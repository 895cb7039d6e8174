package plugin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"noop":                      "lethe.io/noop",
		"example.com/ebs-snapshots": "example.com/ebs-snapshots",
		"a.b.c/x1":                  "a.b.c/x1",
	} {
		got, err := NormalizeName(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "Example.com/x", "example.com/", "/x", "a/b/c", "example.com/under_score", "x y"} {
		_, err := NormalizeName(bad)
		require.Error(t, err, bad)
	}
}

type nopAction struct{}

func (nopAction) AppliesTo(context.Context) (ResourceSelector, error)   { return ResourceSelector{}, nil }
func (nopAction) Execute(context.Context, *DeleteItemActionInput) error { return nil }

func TestServeConfigValidation(t *testing.T) {
	_, err := newServers(nil, nil)
	require.Error(t, err)
	_, err = GRPCPlugin(nil, &Plugin{Name: "noop", Action: nopAction{}}, &Plugin{Name: "lethe.io/noop", Action: nopAction{}})
	require.ErrorContains(t, err, `"lethe.io/noop" is served twice`)
	_, err = GRPCPlugin(nil, &Plugin{Name: "example.com/a"})
	require.ErrorContains(t, err, "Action is nil")
	_, err = GRPCPlugin(nil, &Plugin{Name: "example.com/a", Action: nopAction{}, MaxConcurrency: -1})
	require.ErrorContains(t, err, "negative")
	_, err = GRPCPlugin(nil, &Plugin{Name: "aws", Action: nopAction{}})
	require.ErrorContains(t, err, "reserved for Lethe's own plugins")
	_, err = GRPCPlugin(nil, &Plugin{Name: "lethe.io/aws", Action: nopAction{}})
	require.ErrorContains(t, err, "reserved for Lethe's own plugins")
	_, err = GRPCPlugin(nil, &Plugin{Name: "example.com/a", Version: "v1\x1b[2K", Action: nopAction{}})
	require.ErrorContains(t, err, "version")
	p, err := GRPCPlugin(nil, &Plugin{Name: "noop", Action: nopAction{}}, &Plugin{Name: "example.com/a", Action: nopAction{}})
	require.NoError(t, err)
	resp, err := p.(*grpcPlugin).info.ListPlugins(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, resp.Plugins, 2)
	require.Equal(t, "example.com/a", resp.Plugins[0].Name)
	require.Equal(t, uint32(DefaultMaxConcurrency), resp.Plugins[1].MaxConcurrency)
}
