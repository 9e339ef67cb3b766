package ingest

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// Decode decodes one spooled EventBatch with syncpb.Walk rather than proto.Unmarshal, so that
// one bad event cannot make a whole batch undecodable: strings are taken as the bytes they are
// (proto.Unmarshal refuses a string that is not UTF-8; PostgreSQL then refuses the event alone,
// and it is dead-lettered), and an event malformed at the wire level is kept raw and marked
// Undecodable. Each event's Raw is its encoding, aliasing raw, and its ProjectID is the
// batch's.
//
// It is the one reader of a batch's project: the sync service checks an edge's scope on the
// batch it returns and hands that same batch to be stored, so what is checked is what is
// stored. A batch whose own framing is broken, or that repeats a singular field (project_id,
// historical_migration) or writes one with another wire type, becomes one undecodable event
// holding the whole batch: for the project named before the break, and for project 0 when
// project_id repeats (protobuf would take the last of two, a walker that stops early the
// first, and no reader may choose between them).
func Decode(raw []byte, edgeID string) controlplane.EventBatch {
	b := controlplane.EventBatch{EdgeID: edgeID}
	var seenProject, seenHistorical bool
	err := syncpb.Walk(raw, func(f syncpb.Field) error {
		switch f.Num {
		case syncpb.EventBatchProjectID:
			if seenProject || f.Type != protowire.VarintType {
				return badHeader("project_id")
			}
			seenProject, b.ProjectID = true, int64(f.Varint)
		case syncpb.EventBatchHistorical:
			if seenHistorical || f.Type != protowire.VarintType {
				return badHeader("historical_migration")
			}
			seenHistorical, b.HistoricalMigration = true, f.Varint != 0
		case syncpb.EventBatchEvents:
			if f.Type == protowire.BytesType {
				b.Events = append(b.Events, decodeEvent(f.Bytes))
			}
		}
		return nil
	})
	if err != nil {
		if errors.As(err, new(badHeader)) {
			b.ProjectID = 0 // neither of two project ids is the batch's
		}
		// One undecodable event holding all of it, for the project named so far.
		b.Events = []controlplane.Event{{ProjectID: b.ProjectID, Raw: raw, Undecodable: fmt.Sprintf("undecodable batch: %v", err)}}
		return b
	}
	for i := range b.Events {
		b.Events[i].ProjectID = b.ProjectID
	}
	return b
}

// badHeader is the error of a batch that repeats a singular field, or writes it with another
// wire type: it names the field.
type badHeader string

func (f badHeader) Error() string { return string(f) + " repeated or not a varint" }

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
