package plugin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

func batchMsg(t *testing.T, items ...*pluginv1.Item) []byte {
	t.Helper()
	b, err := proto.Marshal(&pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Batch{Batch: &pluginv1.ItemBatch{Items: items}}})
	require.NoError(t, err)
	return b
}

// TestBatchCodecDecodesAsProtobufDoes: the fast path gives the same items
// as protobuf, and leaves to protobuf whatever it does not know.
func TestBatchCodecDecodesAsProtobufDoes(t *testing.T) {
	c := batchCodec{base: codecOption2Base()}
	items := []*pluginv1.Item{
		{Id: 1, Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespace: "ns", Name: "web", Object: []byte(`{"a":1}`)},
		{Id: 0, Version: "v1", Resource: "persistentvolumes", Kind: "PersistentVolume", Name: "pv-1"},
		{Id: 1 << 40, Resource: "pods", Name: "ü-é"},
	}
	var w wireRequest
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(batchMsg(t, items...))}, &w))
	require.Len(t, w.slots, len(items))
	for i, it := range items {
		require.Equal(t, it.GetId(), w.slots[i].id)
		require.Equal(t, itemFromProto(it), w.slots[i].in.Item)
	}
	var req pluginv1.ExecuteRequest
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(batchMsg(t, items...))}, &req))
	require.True(t, proto.Equal(&pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Batch{Batch: &pluginv1.ItemBatch{Items: items}}}, &req))

	// Not a batch: protobuf decodes it.
	cancel, err := proto.Marshal(&pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Cancel{Cancel: &pluginv1.CancelItems{Ids: []uint64{3}, Reason: "r"}}})
	require.NoError(t, err)
	w = wireRequest{}
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(cancel)}, &w))
	require.Nil(t, w.slots)
	require.Equal(t, []uint64{3}, w.req.GetCancel().GetIds())

	// Invalid UTF-8 in a string is refused, as protobuf refuses it.
	bad := batchMsg(t, &pluginv1.Item{Id: 1, Name: "xx"})
	bad[len(bad)-1] = 0xff
	w = wireRequest{}
	require.Error(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bad)}, &w))
}

// TestWireResponseEncodesAsProtobufDoes: results encoded from slots decode
// into the same ExecuteResponse.
func TestWireResponseEncodesAsProtobufDoes(t *testing.T) {
	slots := []slot{
		{id: 1, outcome: pluginv1.Outcome_OUTCOME_DONE},
		{id: 0, outcome: pluginv1.Outcome_OUTCOME_FAILED, extra: &slotExtra{message: "boom"}},
		{id: 7, outcome: pluginv1.Outcome_OUTCOME_BLOCKED, extra: &slotExtra{message: "locked", retryAfter: durationpb.New(90*time.Second + 5)}},
	}
	w := &wireResponse{}
	want := &pluginv1.ExecuteResponse{}
	for i := range slots {
		w.slots = append(w.slots, &slots[i])
		want.Results = append(want.Results, slots[i].result())
	}
	c := batchCodec{base: codecOption2Base()}
	data, err := c.Marshal(w)
	require.NoError(t, err)
	var got pluginv1.ExecuteResponse
	require.NoError(t, proto.Unmarshal(data.Materialize(), &got))
	require.True(t, proto.Equal(want, &got), "got %v, want %v", &got, want)
}

// TestRecvPoolReusesReleasedBatches: a batch's buffer is received into
// again only once every one of its items is released; the strings never
// alias it.
func TestRecvPoolReusesReleasedBatches(t *testing.T) {
	c := batchCodec{base: codecOption2Base()}
	pool := newRecvPool()
	recv := func(name string) *wireRequest {
		items := []*pluginv1.Item{
			{Id: 1, Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "ns", Name: name + "-a", Object: []byte(`{"n":"` + name + `-a"}`)},
			{Id: 2, Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "ns", Name: name + "-b", Object: []byte(`{"n":"` + name + `-b"}`)},
		}
		w := &wireRequest{pool: pool}
		require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(batchMsg(t, items...))}, w))
		require.Len(t, w.slots, 2)
		return w
	}
	first := recv("one")
	buf := first.slots[0].buf
	name := first.slots[0].in.Item.Name
	first.slots[0].release()
	require.Nil(t, first.slots[0].in.Item.Object)
	// One item still holds the buffer: the next batch gets another.
	second := recv("two")
	require.NotSame(t, buf, second.slots[0].buf)
	require.Equal(t, `{"n":"one-b"}`, string(first.slots[1].in.Item.Object))
	first.slots[1].release()
	third := recv("six")
	require.Same(t, buf, third.slots[0].buf, "a released buffer is received into again")
	require.Equal(t, "one-a", name)
	require.Equal(t, "one-b", first.slots[1].in.Item.Name)
	require.Equal(t, `{"n":"six-a"}`, string(third.slots[0].in.Item.Object))
	require.Equal(t, `{"n":"two-b"}`, string(second.slots[1].in.Item.Object))
}
