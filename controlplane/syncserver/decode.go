package syncserver

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flagedge/flagedge/controlplane"
)

// Field numbers of the sync protocol's EventBatch and CapturedEvent messages.
const (
	batchProjectID  = 1
	batchEvents     = 2
	batchHistorical = 3

	eventUUID       = 1
	eventName       = 2
	eventDistinctID = 3
	eventProperties = 4
	eventTimestamp  = 5
	eventReceived   = 6
)

// decodeBatch decodes one spooled EventBatch. It walks the wire format itself rather than
// calling proto.Unmarshal, so that one bad event cannot make a whole batch undecodable:
// strings are taken as the bytes they are (proto.Unmarshal refuses a string that is not
// UTF-8; PostgreSQL then refuses the event alone, and it is dead-lettered), and an event
// malformed at the wire level is kept raw and marked Undecodable. A batch whose own framing
// is broken becomes one undecodable event holding the whole batch. Each event's Raw is its
// encoding, aliasing raw.
func decodeBatch(raw []byte, edgeID string) controlplane.EventBatch {
	b := controlplane.EventBatch{EdgeID: edgeID}
	rest := raw
	for len(rest) > 0 {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return brokenBatch(b, raw, protowire.ParseError(n))
		}
		rest = rest[n:]
		switch {
		case num == batchProjectID && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return brokenBatch(b, raw, protowire.ParseError(n))
			}
			b.ProjectID, rest = int64(v), rest[n:]
		case num == batchHistorical && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return brokenBatch(b, raw, protowire.ParseError(n))
			}
			b.HistoricalMigration, rest = v != 0, rest[n:]
		case num == batchEvents && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return brokenBatch(b, raw, protowire.ParseError(n))
			}
			b.Events, rest = append(b.Events, decodeEvent(v)), rest[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, rest)
			if n < 0 {
				return brokenBatch(b, raw, protowire.ParseError(n))
			}
			rest = rest[n:]
		}
	}
	for i := range b.Events {
		b.Events[i].ProjectID = b.ProjectID
	}
	return b
}

// brokenBatch is a batch that cannot be decoded: one undecodable event holding all of it,
// for the project named so far (0 when none).
func brokenBatch(b controlplane.EventBatch, raw []byte, err error) controlplane.EventBatch {
	b.Events = []controlplane.Event{{ProjectID: b.ProjectID, Raw: raw, Undecodable: fmt.Sprintf("undecodable batch: %v", err)}}
	return b
}

// decodeEvent decodes one CapturedEvent; a malformed one is returned Undecodable.
func decodeEvent(raw []byte) controlplane.Event {
	e := controlplane.Event{Raw: raw}
	var timestampUs, receivedUs int64
	rest := raw
	fail := func(err error) controlplane.Event {
		return controlplane.Event{Raw: raw, Undecodable: fmt.Sprintf("undecodable event: %v", err)}
	}
	for len(rest) > 0 {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return fail(protowire.ParseError(n))
		}
		rest = rest[n:]
		switch {
		case typ == protowire.BytesType && (num == eventUUID || num == eventName || num == eventDistinctID || num == eventProperties):
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return fail(protowire.ParseError(n))
			}
			rest = rest[n:]
			switch num {
			case eventUUID:
				e.UUID = string(v)
			case eventName:
				e.Name = string(v)
			case eventDistinctID:
				e.DistinctID = string(v)
			case eventProperties:
				e.Properties = v
			}
		case typ == protowire.VarintType && (num == eventTimestamp || num == eventReceived):
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return fail(protowire.ParseError(n))
			}
			rest = rest[n:]
			if num == eventTimestamp {
				timestampUs = int64(v)
			} else {
				receivedUs = int64(v)
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, rest)
			if n < 0 {
				return fail(protowire.ParseError(n))
			}
			rest = rest[n:]
		}
	}
	if e.UUID == "" {
		return fail(errors.New("no uuid"))
	}
	e.Timestamp, e.ReceivedAt = time.UnixMicro(timestampUs).UTC(), time.UnixMicro(receivedUs).UTC()
	return e
}

// batchProject is the project id of an encoded EventBatch, without decoding its events; 0
// when its framing is broken before the id.
func batchProject(raw []byte) int64 {
	for rest := raw; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return 0
		}
		rest = rest[n:]
		if num == batchProjectID && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return 0
			}
			return int64(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, rest)
		if n < 0 {
			return 0
		}
		rest = rest[n:]
	}
	return 0
}
