package plugintest

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lethehq/lethe/pkg/plugin"
	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

func TestServeRun(t *testing.T) {
	items := sampleItems(t)
	c := Serve(t, &plugin.Plugin{Name: "example.com/sample", Action: &fakeAction{Selector: sampleSelector, ExecuteFunc: byName}})
	c.BatchSize = 2
	checkSample(t, c.Run(t, "example.com/sample", items...), items)

	list, err := c.ListPlugins(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "example.com/sample", list[0].GetName())
}

func TestServeRejectsBadPlugins(t *testing.T) {
	msg := fatalMessage(t, func(tb testing.TB) { Serve(tb, &plugin.Plugin{Name: "Not A Name", Action: &fakeAction{}}) })
	require.Contains(t, msg, "Not A Name")
}

func TestStreamCancelReachesCtx(t *testing.T) {
	started := make(chan struct{})
	c := Serve(t, &plugin.Plugin{Name: "example.com/slow", Action: &fakeAction{ExecuteFunc: func(ctx context.Context, in *plugin.DeleteItemActionInput) error {
		close(started)
		return waitForCancel(ctx, in)
	}}})
	s, err := c.OpenStream(t.Context(), "example.com/slow", plugin.Backup{Name: "b"})
	require.NoError(t, err)
	ids, err := s.Send(plugin.Item{Resource: "pods", Namespace: "a", Name: "slow"})
	require.NoError(t, err)
	<-started
	require.NoError(t, s.Cancel("host says stop", ids...))
	res, err := s.Wait()
	require.NoError(t, err)
	require.Equal(t, plugin.OutcomeFailed, res[ids[0]].Outcome)
	require.Contains(t, res[ids[0]].Message, "host says stop")
}

func TestConnUnknownPlugin(t *testing.T) {
	c := Serve(t, &plugin.Plugin{Name: "example.com/one", Action: &fakeAction{}})
	require.NoError(t, checkUnknown(t.Context(), c, []string{"example.com/one"}))
	_, err := c.AppliesTo(t.Context(), "example.com/two")
	require.Equal(t, codes.NotFound, status.Code(err))
}

// badAction is a protocol server that misbehaves as told.
type badAction struct {
	pluginv1.UnimplementedDeleteItemActionServiceServer
	// answer maps the items of a batch to the response to send, or nil to
	// answer nothing.
	answer func(items []*pluginv1.Item) *pluginv1.ExecuteResponse
	// dropCancelled forgets items that are cancelled.
	dropCancelled bool
}

func (b *badAction) AppliesTo(context.Context, *pluginv1.AppliesToRequest) (*pluginv1.AppliesToResponse, error) {
	return &pluginv1.AppliesToResponse{Selector: &pluginv1.ResourceSelector{}}, nil
}

func (b *badAction) Execute(s pluginv1.DeleteItemActionService_ExecuteServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	var held []*pluginv1.Item
	for {
		req, err := s.Recv()
		if err == io.EOF {
			for _, it := range held {
				if err := s.Send(&pluginv1.ExecuteResponse{Results: []*pluginv1.ItemResult{{Id: it.GetId(), Outcome: pluginv1.Outcome_OUTCOME_DONE}}}); err != nil {
					return err
				}
			}
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case req.GetBatch() != nil:
			if b.dropCancelled {
				held = append(held, req.GetBatch().GetItems()...)
				continue
			}
			if resp := b.answer(req.GetBatch().GetItems()); resp != nil {
				if err := s.Send(resp); err != nil {
					return err
				}
			}
		case req.GetCancel() != nil && b.dropCancelled:
			held = held[:0]
		}
	}
}

type listOf []*pluginv1.PluginDescriptor

type infoServer struct {
	pluginv1.UnimplementedPluginInfoServiceServer
	list listOf
}

func (i *infoServer) ListPlugins(context.Context, *pluginv1.ListPluginsRequest) (*pluginv1.ListPluginsResponse, error) {
	return &pluginv1.ListPluginsResponse{Plugins: i.list}, nil
}

func each(outcome pluginv1.Outcome, msg string, dup bool) func([]*pluginv1.Item) *pluginv1.ExecuteResponse {
	return func(items []*pluginv1.Item) *pluginv1.ExecuteResponse {
		resp := &pluginv1.ExecuteResponse{}
		for _, it := range items {
			resp.Results = append(resp.Results, &pluginv1.ItemResult{Id: it.GetId(), Outcome: outcome, Message: msg})
			if dup {
				resp.Results = append(resp.Results, &pluginv1.ItemResult{Id: it.GetId(), Outcome: outcome, Message: msg})
			}
		}
		return resp
	}
}

// TestChecksCatchViolations shows that the conformance checks fail on
// servers that break the protocol.
func TestChecksCatchViolations(t *testing.T) {
	samples := []plugin.Item{{Resource: "pods", Namespace: "a", Name: "x"}, {Resource: "pods", Namespace: "a", Name: "y"}}
	good := &pluginv1.PluginDescriptor{Kind: pluginv1.PluginKind_PLUGIN_KIND_DELETE_ITEM_ACTION, Name: "example.com/p"}
	for _, tc := range []struct {
		name    string
		action  *badAction
		wantErr string
	}{
		{"fine", &badAction{answer: each(pluginv1.Outcome_OUTCOME_DONE, "", false)}, ""},
		{"no results", &badAction{answer: func([]*pluginv1.Item) *pluginv1.ExecuteResponse { return nil }}, "unanswered"},
		{"duplicate", &badAction{answer: each(pluginv1.Outcome_OUTCOME_DONE, "", true)}, "second result"},
		{"unknown outcome", &badAction{answer: each(pluginv1.Outcome_OUTCOME_UNSPECIFIED, "", false)}, "unknown outcome"},
		{"multi-line", &badAction{answer: each(pluginv1.Outcome_OUTCOME_FAILED, "a\nb", false)}, "one line"},
		{"unknown id", &badAction{answer: func([]*pluginv1.Item) *pluginv1.ExecuteResponse {
			return &pluginv1.ExecuteResponse{Results: []*pluginv1.ItemResult{{Id: 99, Outcome: pluginv1.Outcome_OUTCOME_DONE}}}
		}}, "never sent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ServeServers(t, &infoServer{list: listOf{good}}, tc.action)
			_, err := checkExecute(t.Context(), c, "example.com/p", plugin.Backup{}, samples)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}

	t.Run("cancelled item dropped", func(t *testing.T) {
		c := ServeServers(t, &infoServer{}, &badAction{dropCancelled: true})
		require.ErrorContains(t, checkCancel(t.Context(), c, "example.com/p", plugin.Backup{}, samples[0]), "unanswered")
	})
	t.Run("serves anything", func(t *testing.T) {
		c := ServeServers(t, &infoServer{}, &badAction{answer: each(pluginv1.Outcome_OUTCOME_DONE, "", false)})
		require.ErrorContains(t, checkUnknown(t.Context(), c, nil), "does not serve")
	})
}

func TestCheckList(t *testing.T) {
	d := func(name string, kind pluginv1.PluginKind) *pluginv1.PluginDescriptor {
		return &pluginv1.PluginDescriptor{Name: name, Kind: kind}
	}
	const dia = pluginv1.PluginKind_PLUGIN_KIND_DELETE_ITEM_ACTION
	for _, tc := range []struct {
		name    string
		list    listOf
		want    []string
		wantErr string
	}{
		{"fine", listOf{d("example.com/a", dia), d("lethe.io/b", dia)}, []string{"b", "example.com/a"}, ""},
		{"empty", nil, nil, "no plugin"},
		{"bare name", listOf{d("noop", dia)}, nil, "full form"},
		{"invalid", listOf{d("Example.com/A", dia)}, nil, "Example.com"},
		{"twice", listOf{d("example.com/a", dia), d("example.com/a", dia)}, nil, "twice"},
		{"kind", listOf{d("example.com/a", pluginv1.PluginKind_PLUGIN_KIND_UNSPECIFIED)}, nil, "kind"},
		{"not wanted", listOf{d("example.com/a", dia)}, []string{"example.com/b"}, "want"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkList(tc.list, tc.want)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestBackupReachesThePluginFieldByField: every field of plugin.Backup,
// Lethe's identity and the source system's, crosses the wire unchanged.
func TestBackupReachesThePluginFieldByField(t *testing.T) {
	got := make(chan plugin.Backup, 1)
	c := Serve(t, &plugin.Plugin{Name: "example.com/backup", Action: &fakeAction{ExecuteFunc: func(_ context.Context, in *plugin.DeleteItemActionInput) error {
		select {
		case got <- in.Backup:
		default:
		}
		return nil
	}}})
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	want := plugin.Backup{
		Name: "nightly-0412", UID: "0199a1b2-0000-7000-8000-000000000001",
		Labels: map[string]string{"app": "shop"}, Annotations: map[string]string{"a": "b"},
		CreatedAt: at("2026-11-26T10:00:00Z"), ExpiresAt: at("2026-05-12T03:00:00Z"),
		StorageLocation: "file:///bucket/backups/nightly-0412/nightly-0412.tar.gz",
		SourceUID:       "6b5a1c2e-0000-4000-8000-00000000000c", SourceCreatedAt: at("2026-04-12T03:00:00Z"),
	}
	s, err := c.OpenStream(t.Context(), "example.com/backup", want)
	require.NoError(t, err)
	_, err = s.Send(plugin.Item{Resource: "pods", Namespace: "a", Name: "p"})
	require.NoError(t, err)
	_, err = s.Wait()
	require.NoError(t, err)
	b := <-got
	require.Equal(t, want.SourceUID, b.SourceUID)
	require.True(t, want.SourceCreatedAt.Equal(b.SourceCreatedAt))
	require.True(t, want.CreatedAt.Equal(b.CreatedAt))
	require.True(t, want.ExpiresAt.Equal(b.ExpiresAt))
	b.CreatedAt, b.ExpiresAt, b.SourceCreatedAt = want.CreatedAt, want.ExpiresAt, want.SourceCreatedAt
	require.Equal(t, want, b)
}
