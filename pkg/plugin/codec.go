package plugin

import (
	"sync"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// batchCodec is the gRPC codec of a plugin's server. It is the protobuf
// codec, with one fast path: an ExecuteRequest carrying an ItemBatch is
// decoded with one allocation for the message's bytes and one for all its
// items, their strings and objects pointing into those bytes, instead of
// eight allocations per item. The wire is unchanged; any message the fast
// path does not recognise in full (another field, a malformed one) goes to
// the protobuf codec.
type batchCodec struct{ base encoding.CodecV2 }

// codecOption installs batchCodec on a gRPC server.
func codecOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(batchCodec{base: codecOption2Base()})
}

// codecOption2Base is gRPC's protobuf codec.
func codecOption2Base() encoding.CodecV2 { return encoding.GetCodecV2(grpcproto.Name) }

func (c batchCodec) Name() string { return grpcproto.Name }

// fastServers holds the gRPC servers NewGRPCServer built, whose codec is
// batchCodec: the SDK's Execute streams on them receive into wireRequest
// and send wireResponse.
var fastServers sync.Map // *grpc.Server -> struct{}

// wireRequest is what an execution receives an ExecuteRequest into: an
// ItemBatch decoded straight into the slots the execution runs items in
// (one allocation for the message's bytes, one for its slots), or any
// other message as protobuf.
type wireRequest struct {
	slots []slot
	req   pluginv1.ExecuteRequest
	// pool, when set, is where the batch's bytes are received, to be
	// reused once its items are released (see recvPool).
	pool *recvPool
}

// wireResponse is an ExecuteResponse carrying the results in slots,
// encoded without building an ItemResult per item.
type wireResponse struct {
	slots []*slot
}

func (c batchCodec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(*wireResponse); ok {
		return w.marshal(), nil
	}
	return c.base.Marshal(v)
}

func (c batchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*wireRequest); ok {
		if w.pool == nil {
			b := data.Materialize()
			if w.decodeBatch(b, nil) {
				return nil
			}
			w.slots = nil
			return proto.Unmarshal(b, &w.req)
		}
		rb := w.pool.get(data.Len())
		data.CopyTo(rb.b)
		if w.decodeBatch(rb.b, rb) {
			return nil
		}
		w.slots = nil
		return proto.Unmarshal(rb.b, &w.req) // copies what it keeps: rb is garbage
	}
	req, ok := v.(*pluginv1.ExecuteRequest)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	// Materialize copies into a buffer of our own, which the items may
	// then point into: it is never written again.
	b := data.Materialize()
	if batch, ok := decodeBatchRequest(b); ok {
		req.Msg = &pluginv1.ExecuteRequest_Batch{Batch: batch}
		return nil
	}
	return proto.Unmarshal(b, req)
}

// batchBody returns the ItemBatch of an ExecuteRequest whose only field is
// one, and how many items it holds; ok is false for anything else.
func batchBody(b []byte) (body []byte, count int, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return nil, 0, false
	}
	body, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, 0, false
	}
	for rest := body; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return nil, 0, false
		}
		_, m := protowire.ConsumeBytes(rest[n:])
		if m < 0 {
			return nil, 0, false
		}
		rest = rest[n+m:]
		count++
	}
	return body, count, true
}

// decodeBatch decodes b into w.slots if it is an ItemBatch request. With
// rb (b's buffer, from w.pool), the objects alias b and each slot holds a
// reference to rb, and the strings are w.pool's; without, everything
// aliases b, which is never written again.
func (w *wireRequest) decodeBatch(b []byte, rb *recvBuf) bool {
	body, count, ok := batchBody(b)
	if !ok {
		return false
	}
	w.slots = make([]slot, count)
	var it pluginv1.Item
	for i, rest := 0, body; len(rest) > 0; i++ {
		_, _, n := protowire.ConsumeTag(rest)
		msg, m := protowire.ConsumeBytes(rest[n:])
		rest = rest[n+m:]
		it.Reset()
		if !decodeItem(msg, &it) {
			return false
		}
		sl := &w.slots[i]
		sl.id = it.Id
		if rb == nil {
			sl.in.Item = itemFromProto(&it)
			continue
		}
		p := w.pool
		sl.in.Item = Item{
			Group:     p.intern(it.Group),
			Version:   p.intern(it.Version),
			Resource:  p.intern(it.Resource),
			Kind:      p.intern(it.Kind),
			Namespace: p.intern(it.Namespace),
			Name:      p.copy(it.Name),
			Object:    it.Object,
		}
	}
	if rb != nil {
		rb.refs.Store(int32(count)) //nolint:gosec // G115: a message holds far fewer than 2^31 items
		if count == 0 {
			rb.refs.Store(1)
			rb.release()
		}
		for i := range w.slots {
			w.slots[i].buf = rb
		}
	}
	return true
}

// marshal encodes an ExecuteResponse of the slots' results.
func (w *wireResponse) marshal() mem.BufferSlice {
	size := 0
	for _, sl := range w.slots {
		n := sl.resultSize()
		size += protowire.SizeTag(1) + protowire.SizeBytes(n)
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	b := (*buf)[:0]
	for _, sl := range w.slots {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sl.resultSize())) //nolint:gosec // G115: protobuf encodes varints as two's-complement uint64
		b = sl.appendResult(b)
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}
}

// resultSize is the size of the slot's ItemResult.
func (sl *slot) resultSize() int {
	n := 0
	if sl.id != 0 {
		n += protowire.SizeTag(1) + protowire.SizeVarint(sl.id)
	}
	if sl.outcome != 0 {
		n += protowire.SizeTag(2) + protowire.SizeVarint(uint64(sl.outcome)) //nolint:gosec // G115: protobuf encodes varints as two's-complement uint64
	}
	if m := sl.message(); m != "" {
		n += protowire.SizeTag(3) + protowire.SizeBytes(len(m))
	}
	if d := sl.retryAfter(); d != nil {
		n += protowire.SizeTag(4) + protowire.SizeBytes(durationSize(d))
	}
	return n
}

func (sl *slot) appendResult(b []byte) []byte {
	if sl.id != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, sl.id)
	}
	if sl.outcome != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(sl.outcome)) //nolint:gosec // G115: protobuf encodes varints as two's-complement uint64
	}
	if m := sl.message(); m != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, m)
	}
	if d := sl.retryAfter(); d != nil {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(d))) //nolint:gosec // G115: protobuf encodes varints as two's-complement uint64
		if s := d.GetSeconds(); s != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(s)) //nolint:gosec // G115: protobuf encodes varints as two's-complement uint64
		}
		if ns := d.GetNanos(); ns != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(ns)) //nolint:gosec // G115: protobuf encodes varints as two's-complement uint64
		}
	}
	return b
}

func durationSize(d *durationpb.Duration) int {
	n := 0
	if s := d.GetSeconds(); s != 0 {
		n += protowire.SizeTag(1) + protowire.SizeVarint(uint64(s)) //nolint:gosec // G115: protobuf encodes varints as two's-complement uint64
	}
	if ns := d.GetNanos(); ns != 0 {
		n += protowire.SizeTag(2) + protowire.SizeVarint(uint64(ns)) //nolint:gosec // G115: protobuf encodes varints as two's-complement uint64
	}
	return n
}

// decodeBatchRequest decodes b as an ExecuteRequest whose only field is an
// ItemBatch of Items with known fields. ok is false for anything else.
func decodeBatchRequest(b []byte) (_ *pluginv1.ItemBatch, ok bool) {
	body, count, ok := batchBody(b)
	if !ok {
		return nil, false
	}
	items := make([]pluginv1.Item, count)
	ptrs := make([]*pluginv1.Item, count)
	for i, rest := 0, body; len(rest) > 0; i++ {
		_, _, n := protowire.ConsumeTag(rest)
		msg, m := protowire.ConsumeBytes(rest[n:])
		rest = rest[n+m:]
		if !decodeItem(msg, &items[i]) {
			return nil, false
		}
		ptrs[i] = &items[i]
	}
	return &pluginv1.ItemBatch{Items: ptrs}, true
}

// decodeItem decodes one Item; strings and the object alias b.
func decodeItem(b []byte, it *pluginv1.Item) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == 1 {
			if typ != protowire.VarintType {
				return false
			}
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return false
			}
			it.Id, b = v, b[m:]
			continue
		}
		if typ != protowire.BytesType || num < 2 || num > 8 {
			return false
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return false
		}
		b = b[m:]
		if num < 8 && !utf8.Valid(v) {
			return false // proto.Unmarshal says why
		}
		switch num {
		case 2:
			it.Group = aliasString(v)
		case 3:
			it.Version = aliasString(v)
		case 4:
			it.Resource = aliasString(v)
		case 5:
			it.Kind = aliasString(v)
		case 6:
			it.Namespace = aliasString(v)
		case 7:
			it.Name = aliasString(v)
		case 8:
			it.Object = v[:len(v):len(v)]
		}
	}
	return true
}

// aliasString returns b as a string without copying: b is never written.
func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b)) //nolint:gosec // G103: callers never write b afterwards
}
