package syncpb

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of EventBatch and CapturedEvent, as sync.proto gives them, for the code that
// walks a spooled batch instead of unmarshalling it (walk_test.go checks them against the
// generated descriptors).
const (
	EventBatchProjectID  protowire.Number = 1
	EventBatchEvents     protowire.Number = 2
	EventBatchHistorical protowire.Number = 3

	CapturedEventUUID       protowire.Number = 1
	CapturedEventName       protowire.Number = 2
	CapturedEventDistinctID protowire.Number = 3
	CapturedEventProperties protowire.Number = 4
	CapturedEventTimestamp  protowire.Number = 5
	CapturedEventReceived   protowire.Number = 6
)

// Field is one field of an encoded message, as Walk meets it.
type Field struct {
	Num  protowire.Number
	Type protowire.Type
	// Raw is the whole field, tag included, aliasing the message: the fields' Raw laid end
	// to end are the message.
	Raw []byte
	// Bytes is a length-delimited field's content (a string, bytes or an embedded message).
	Bytes []byte
	// Varint is a varint field's value.
	Varint uint64
}

// Walk calls fn with each field of an encoded message, in the order written, without
// unmarshalling it. The spooled event batches are walked rather than unmarshalled so that one
// bad event cannot spoil its batch: proto.Unmarshal refuses the whole message for one string
// that is not UTF-8, or for one malformed event, where a walker keeps the rest and hands the
// bad part on as the bytes it is. Walk returns fn's first error, or the wire-format error of
// the first field whose framing is broken (the fields before it have been passed to fn).
func Walk(msg []byte, fn func(Field) error) error {
	for rest := msg; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		f := Field{Num: num, Type: typ, Raw: rest[:n+m]}
		switch typ {
		case protowire.VarintType:
			f.Varint, _ = protowire.ConsumeVarint(rest[n:]) // framed above
		case protowire.BytesType:
			f.Bytes, _ = protowire.ConsumeBytes(rest[n:])
		}
		if err := fn(f); err != nil {
			return err
		}
		rest = rest[n+m:]
	}
	return nil
}
