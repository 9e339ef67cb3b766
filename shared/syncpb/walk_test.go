package syncpb_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/shared/syncpb"
)

// TestWalkFieldNumbers holds the hand-walkers' field numbers against the generated code.
func TestWalkFieldNumbers(t *testing.T) {
	for _, tc := range []struct {
		msg   proto.Message
		field protoreflect.Name
		num   protowire.Number
	}{
		{&syncpb.EventBatch{}, "project_id", syncpb.EventBatchProjectID},
		{&syncpb.EventBatch{}, "events", syncpb.EventBatchEvents},
		{&syncpb.EventBatch{}, "historical_migration", syncpb.EventBatchHistorical},
		{&syncpb.CapturedEvent{}, "uuid", syncpb.CapturedEventUUID},
		{&syncpb.CapturedEvent{}, "event", syncpb.CapturedEventName},
		{&syncpb.CapturedEvent{}, "distinct_id", syncpb.CapturedEventDistinctID},
		{&syncpb.CapturedEvent{}, "properties", syncpb.CapturedEventProperties},
		{&syncpb.CapturedEvent{}, "timestamp_us", syncpb.CapturedEventTimestamp},
		{&syncpb.CapturedEvent{}, "received_us", syncpb.CapturedEventReceived},
	} {
		fd := tc.msg.ProtoReflect().Descriptor().Fields().ByName(tc.field)
		if fd == nil {
			t.Errorf("%s has no field %s", tc.msg.ProtoReflect().Descriptor().Name(), tc.field)
			continue
		}
		if fd.Number() != tc.num {
			t.Errorf("%s.%s is field %d, the walkers use %d", tc.msg.ProtoReflect().Descriptor().Name(), tc.field, fd.Number(), tc.num)
		}
	}
	// The CapturedEvent has no fields the walkers do not know of: a new one must be taken
	// into account by them (and added above).
	if n := (&syncpb.CapturedEvent{}).ProtoReflect().Descriptor().Fields().Len(); n != 6 {
		t.Errorf("CapturedEvent has %d fields; the walkers know 6", n)
	}
}

// walkBatch rebuilds an EventBatch from its encoding with Walk alone.
func walkBatch(t *testing.T, raw []byte) *syncpb.EventBatch {
	t.Helper()
	out := &syncpb.EventBatch{}
	var again []byte
	err := syncpb.Walk(raw, func(f syncpb.Field) error {
		again = append(again, f.Raw...)
		switch f.Num {
		case syncpb.EventBatchProjectID:
			out.ProjectId = int64(f.Varint)
		case syncpb.EventBatchHistorical:
			out.HistoricalMigration = f.Varint != 0
		case syncpb.EventBatchEvents:
			e := &syncpb.CapturedEvent{}
			err := syncpb.Walk(f.Bytes, func(f syncpb.Field) error {
				switch f.Num {
				case syncpb.CapturedEventUUID:
					e.Uuid = string(f.Bytes)
				case syncpb.CapturedEventName:
					e.Event = string(f.Bytes)
				case syncpb.CapturedEventDistinctID:
					e.DistinctId = string(f.Bytes)
				case syncpb.CapturedEventProperties:
					e.Properties = f.Bytes
				case syncpb.CapturedEventTimestamp:
					e.TimestampUs = int64(f.Varint)
				case syncpb.CapturedEventReceived:
					e.ReceivedUs = int64(f.Varint)
				}
				return nil
			})
			if err != nil {
				return err
			}
			out.Events = append(out.Events, e)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	if !bytes.Equal(again, raw) {
		t.Errorf("the fields' Raw laid end to end are not the message")
	}
	return out
}

// TestWalkAgreesWithGeneratedCode walks what the generated code encodes and reads back what
// it wrote.
func TestWalkAgreesWithGeneratedCode(t *testing.T) {
	for name, batch := range map[string]*syncpb.EventBatch{
		"empty":      {},
		"no events":  {ProjectId: 42, HistoricalMigration: true},
		"big values": {ProjectId: 1<<62 + 3, Events: []*syncpb.CapturedEvent{{Uuid: "u", TimestampUs: -1, ReceivedUs: 1<<63 - 1}}},
		"events": {ProjectId: 7, Events: []*syncpb.CapturedEvent{
			{Uuid: "0190e4c4-1a2b-7c3d-8e4f-5a6b7c8d9e0f", Event: "$pageview", DistinctId: "u1", Properties: []byte(`{"a":1}`),
				TimestampUs: 1700000000000000, ReceivedUs: 1700000000000001},
			{Uuid: "0190e4c4-1a2b-7c3d-8e4f-5a6b7c8d9e10", Event: "$identify", DistinctId: "ü2", Properties: []byte(`{"$set":{"x":"\u0000"}}`)},
			{},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			raw, err := proto.Marshal(batch)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(batch, walkBatch(t, raw), protocmp.Transform()); diff != "" {
				t.Errorf("walked (-generated +walked):\n%s", diff)
			}
		})
	}
}

// TestWalkBrokenFraming passes the fields before a broken one and reports the break.
func TestWalkBrokenFraming(t *testing.T) {
	raw, _ := proto.Marshal(&syncpb.EventBatch{ProjectId: 9, Events: []*syncpb.CapturedEvent{{Uuid: "a"}}})
	cut := raw[:len(raw)-1]
	var seen []protowire.Number
	err := syncpb.Walk(cut, func(f syncpb.Field) error { seen = append(seen, f.Num); return nil })
	if err == nil || len(seen) != 1 || seen[0] != syncpb.EventBatchProjectID {
		t.Errorf("walk of a cut batch: fields %v, err %v", seen, err)
	}
}
