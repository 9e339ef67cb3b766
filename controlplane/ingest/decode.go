package ingest

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// decodeBatch decodes one spooled EventBatch with syncpb.Walk rather than proto.Unmarshal,
// so that one bad event cannot make a whole batch undecodable: strings are taken as the bytes
// they are (proto.Unmarshal refuses a string that is not UTF-8; PostgreSQL then refuses the
// event alone, and it is dead-lettered), and an event malformed at the wire level is kept raw
// and marked Undecodable. A batch whose own framing is broken becomes one undecodable event
// holding the whole batch. Each event's Raw is its encoding, aliasing raw.
func decodeBatch(raw []byte, edgeID string) controlplane.EventBatch {
	b := controlplane.EventBatch{EdgeID: edgeID}
	err := syncpb.Walk(raw, func(f syncpb.Field) error {
		switch {
		case f.Num == syncpb.EventBatchProjectID && f.Type == protowire.VarintType:
			b.ProjectID = int64(f.Varint)
		case f.Num == syncpb.EventBatchHistorical && f.Type == protowire.VarintType:
			b.HistoricalMigration = f.Varint != 0
		case f.Num == syncpb.EventBatchEvents && f.Type == protowire.BytesType:
			b.Events = append(b.Events, decodeEvent(f.Bytes))
		}
		return nil
	})
	if err != nil {
		// One undecodable event holding all of it, for the project named so far (0 when none).
		b.Events = []controlplane.Event{{ProjectID: b.ProjectID, Raw: raw, Undecodable: fmt.Sprintf("undecodable batch: %v", err)}}
		return b
	}
	for i := range b.Events {
		b.Events[i].ProjectID = b.ProjectID
	}
	return b
}

// decodeEvent decodes one CapturedEvent; a malformed one is returned Undecodable.
func decodeEvent(raw []byte) controlplane.Event {
	e := controlplane.Event{Raw: raw}
	var timestampUs, receivedUs int64
	err := syncpb.Walk(raw, func(f syncpb.Field) error {
		switch f.Type {
		case protowire.BytesType:
			switch f.Num {
			case syncpb.CapturedEventUUID:
				e.UUID = string(f.Bytes)
			case syncpb.CapturedEventName:
				e.Name = string(f.Bytes)
			case syncpb.CapturedEventDistinctID:
				e.DistinctID = string(f.Bytes)
			case syncpb.CapturedEventProperties:
				e.Properties = f.Bytes
			}
		case protowire.VarintType:
			switch f.Num {
			case syncpb.CapturedEventTimestamp:
				timestampUs = int64(f.Varint)
			case syncpb.CapturedEventReceived:
				receivedUs = int64(f.Varint)
			}
		}
		return nil
	})
	if err == nil && e.UUID == "" {
		err = errors.New("no uuid")
	}
	if err != nil {
		return controlplane.Event{Raw: raw, Undecodable: fmt.Sprintf("undecodable event: %v", err)}
	}
	e.Timestamp, e.ReceivedAt = time.UnixMicro(timestampUs).UTC(), time.UnixMicro(receivedUs).UTC()
	return e
}
