package syncpb

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	gproto "google.golang.org/protobuf/proto"
)

// A project's snapshot goes to every edge that watches it, often thousands at once after a
// change: the control plane encodes it once per version, as the bytes of a WatchResponse's
// snapshots field, and each stream's message is those bytes (and any other fields) sent as
// they are; a relay (edge --serve-edges) passes the bytes it received on the same way. The
// protobuf encoding of a message is the concatenation of its fields' encodings, in any
// order, so a message of several snapshots is their encodings one after the other.

// EncodedResponse is a WatchResponse already encoded, in parts sent one after the other
// without being copied: the parts are shared between streams and never changed. It can be
// sent only by a server made with ServerOptions.
type EncodedResponse struct{ Parts [][]byte }

// EncodeField encodes m as field num of a message (of a WatchResponse, for EncodedResponse).
func EncodeField(num protowire.Number, m gproto.Message) ([]byte, error) {
	raw, err := gproto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", m, err)
	}
	field := protowire.AppendTag(make([]byte, 0, len(raw)+16), num, protowire.BytesType)
	return protowire.AppendBytes(field, raw), nil
}

// codec is gRPC's protobuf codec, except that an *EncodedResponse is sent as it is.
type codec struct{ proto encoding.CodecV2 }

func (c codec) Name() string { return c.proto.Name() }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*EncodedResponse); ok {
		out := make(mem.BufferSlice, 0, len(r.Parts))
		for _, p := range r.Parts {
			if len(p) > 0 {
				out = append(out, mem.SliceBuffer(p)) // Free does nothing: the bytes stay shared
			}
		}
		return out, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if _, ok := v.(*EncodedResponse); ok {
		return fmt.Errorf("syncpb: %T is only sent", v)
	}
	return c.proto.Unmarshal(data, v)
}

// ServerOptions are the gRPC server options a sync service needs (the control plane's, or a
// relay's): its codec (Watch sends pre-encoded messages; without it they fail to send), and
// transport settings for holding many thousands of mostly idle streams. Each connection's
// write buffer is released after every flush rather than held. Over TLS there is no read
// buffer: crypto/tls reads whole records into a buffer of its own, and one in front of it
// would be 4 KiB more per edge for no fewer system calls; in plaintext it is small (what
// edges send is small or, for Ingest, read past the buffer in large reads) and gRPC returns
// it to a pool between reads. The flow-control windows are fixed (WindowBytes, as the edges'
// are) rather than estimated, which costs a ping round trip whenever data arrives: thousands
// of them when every edge acknowledges a change.
func ServerOptions(tls bool) []grpc.ServerOption {
	readBuffer := 4 << 10
	if tls {
		readBuffer = 0
	}
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2(proto.Name)}),
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(readBuffer),
		grpc.InitialWindowSize(WindowBytes), grpc.InitialConnWindowSize(WindowBytes),
	}
}

// WindowBytes is the flow-control window of an edge's connection and streams towards its
// upstream (control plane or relay), both ways: 4 MiB lets an Ingest call of a few MiB
// through in one round trip, and keeps 50 MB/s of snapshots flowing over a link of 80 ms
// round trip. It is memory only while unread.
const WindowBytes = 4 << 20

// MembershipMessageBytes is about the most filter bytes or keys one Watch message carries; a
// larger filter goes alone (up to shared/bloomkeys.MaxFilterBytes; edges accept messages of
// twice that).
const MembershipMessageBytes = 1 << 20

// membershipResetField is a WatchResponse's membership_reset (5) set.
var membershipResetField = protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), 1)

// SendMembership sends a stream's membership changes as the control plane and relays do:
// fields (encoded membership_filters and membership_additions, each shared between streams)
// in their order, in messages of about MembershipMessageBytes, the first led by
// membership_reset when reset is set (sent even without fields). The stream must be served
// by a server made with ServerOptions.
func SendMembership(stream grpc.ServerStream, reset bool, fields [][]byte) error {
	var parts [][]byte
	size := 0
	flush := func() error {
		if !reset && len(parts) == 0 {
			return nil
		}
		var head []byte
		if reset {
			head = membershipResetField
		}
		if err := stream.SendMsg(&EncodedResponse{Parts: append([][]byte{head}, parts...)}); err != nil {
			return err
		}
		parts, size, reset = parts[:0], 0, false
		return nil
	}
	for _, f := range fields {
		parts = append(parts, f)
		if size += len(f); size >= MembershipMessageBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
