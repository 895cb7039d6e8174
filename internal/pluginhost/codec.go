package pluginhost

import (
	"unicode/utf8"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// resultsCodec is the protobuf codec of the Execute stream, with one fast
// path: an ExecuteResponse is decoded with one allocation for its bytes and
// one for all its results (their messages pointing into those bytes),
// instead of one or two per result. The wire is unchanged; a response the
// fast path does not recognise in full (a retryAfter, another field) goes
// to protobuf.
type resultsCodec struct{ base encoding.CodecV2 }

// executeCodec is the CallOption that installs resultsCodec on a call.
var executeCodec = grpc.ForceCodecV2(resultsCodec{base: encoding.GetCodecV2(grpcproto.Name)})

func (c resultsCodec) Name() string { return grpcproto.Name }

func (c resultsCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c resultsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	resp, ok := v.(*pluginv1.ExecuteResponse)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	b := data.Materialize() // ours: the results may point into it
	if decodeResults(b, resp) {
		return nil
	}
	resp.Reset()
	return proto.Unmarshal(b, resp)
}

func decodeResults(b []byte, resp *pluginv1.ExecuteResponse) bool {
	count := 0
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return false
		}
		_, m := protowire.ConsumeBytes(rest[n:])
		if m < 0 {
			return false
		}
		rest = rest[n+m:]
		count++
	}
	results := make([]pluginv1.ItemResult, count)
	ptrs := make([]*pluginv1.ItemResult, count)
	for i, rest := 0, b; len(rest) > 0; i++ {
		_, _, n := protowire.ConsumeTag(rest)
		msg, m := protowire.ConsumeBytes(rest[n:])
		rest = rest[n+m:]
		r := &results[i]
		for len(msg) > 0 {
			num, typ, n := protowire.ConsumeTag(msg)
			if n < 0 {
				return false
			}
			msg = msg[n:]
			switch {
			case (num == 1 || num == 2) && typ == protowire.VarintType:
				v, m := protowire.ConsumeVarint(msg)
				if m < 0 {
					return false
				}
				msg = msg[m:]
				if num == 1 {
					r.Id = v
				} else {
					r.Outcome = pluginv1.Outcome(int32(v)) //nolint:gosec // an enum is an int32 on the wire
				}
			case num == 3 && typ == protowire.BytesType:
				v, m := protowire.ConsumeBytes(msg)
				if m < 0 || !utf8.Valid(v) {
					return false
				}
				msg = msg[m:]
				if len(v) > 0 {
					r.Message = unsafe.String(&v[0], len(v)) //nolint:gosec // G103: b is never written
				}
			default:
				return false // retryAfter, or unknown: protobuf decodes it
			}
		}
		ptrs[i] = r
	}
	resp.Results = ptrs
	return true
}
