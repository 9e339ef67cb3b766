package ingest

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/shared/syncpb"
)

// FuzzDecodeBatch checks the lenient batch decoder against the protobuf library: it never
// panics; every event it returns is either decoded (with a uuid) or marked undecodable with
// its bytes kept, and is stored under the batch's project, the one the sync service checks
// against the edge's scope; a batch that names its project twice is refused whole, under
// project 0; and whenever proto.Unmarshal accepts a batch with one project_id and one
// historical_migration at most, both read the same events.
func FuzzDecodeBatch(f *testing.F) {
	good, _ := proto.Marshal(&syncpb.EventBatch{ProjectId: 7, HistoricalMigration: true, Events: []*syncpb.CapturedEvent{
		{Uuid: "0190e4c4-1a2b-7c3d-8e4f-5a6b7c8d9e0f", Event: "$pageview", DistinctId: "u1", Properties: []byte(`{"a":1}`), TimestampUs: 1700000000000000, ReceivedUs: 1700000000000001},
		{Uuid: "0190e4c4-1a2b-7c3d-8e4f-5a6b7c8d9e10", Event: "$identify", DistinctId: "u2", Properties: []byte(`{"$set":{"x":"\u0000"}}`), TimestampUs: -1},
	}})
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	f.Add([]byte("\xff\xff\xff not protobuf"))
	f.Add([]byte{0x12, 0x05, 0x0a, 0x03, 'a', 0xff, 'b'})           // an event whose uuid is not UTF-8
	f.Add(append(protowire.AppendVarint([]byte{0x08}, 3), good...)) // project 3, then 7
	f.Add(append(append([]byte(nil), good...), 0x08, 0x01))         // project 7, then 1
	f.Add(append(append([]byte(nil), good...), 0x18, 0x00))         // historical twice
	f.Fuzz(func(t *testing.T, raw []byte) {
		b := Decode(raw, "edge")
		if b.EdgeID != "edge" {
			t.Fatalf("edge id %q", b.EdgeID)
		}
		refused := badHeaderFields(raw)
		if refused && (b.ProjectID != 0 || len(b.Events) != 1 || b.Events[0].Undecodable == "") {
			t.Fatalf("a batch repeating a singular field was read as project %d with %d events", b.ProjectID, len(b.Events))
		}
		for _, e := range b.Events {
			if e.ProjectID != b.ProjectID {
				t.Fatalf("event stored under project %d of a batch checked as project %d", e.ProjectID, b.ProjectID)
			}
			if e.Undecodable != "" {
				if !bytes.Contains(raw, e.Raw) { // its bytes, kept (empty for an empty event)
					t.Fatalf("undecodable event %q is not part of the batch", e.Raw)
				}
				continue
			}
			if e.UUID == "" || e.ProjectID != b.ProjectID || !bytes.Contains(raw, e.Raw) {
				t.Fatalf("event %+v of batch %+v", e, b.ProjectID)
			}
		}
		var pb syncpb.EventBatch
		if err := proto.Unmarshal(raw, &pb); err != nil || refused {
			return
		}
		if pb.ProjectId != b.ProjectID || pb.HistoricalMigration != b.HistoricalMigration {
			t.Fatalf("batch header %d/%v, protobuf reads %d/%v", b.ProjectID, b.HistoricalMigration, pb.ProjectId, pb.HistoricalMigration)
		}
		if len(pb.Events) != len(b.Events) {
			t.Fatalf("%d events, protobuf reads %d", len(b.Events), len(pb.Events))
		}
		for i, want := range pb.Events {
			got := b.Events[i]
			if want.Uuid == "" {
				if got.Undecodable == "" {
					t.Fatalf("event %d without a uuid was decoded", i)
				}
				continue
			}
			if got.UUID != want.Uuid || got.Name != want.Event || got.DistinctID != want.DistinctId ||
				!bytes.Equal(got.Properties, want.Properties) || !got.Timestamp.Equal(time.UnixMicro(want.TimestampUs)) ||
				!got.ReceivedAt.Equal(time.UnixMicro(want.ReceivedUs)) {
				t.Fatalf("event %d: %+v, protobuf reads %+v", i, got, want)
			}
		}
	})
}

// badHeaderFields tells whether the batch, up to a broken framing, repeats project_id or
// historical_migration, or writes one with another wire type than varint: Decode refuses it.
func badHeaderFields(raw []byte) bool {
	seen := map[protowire.Number]bool{}
	bad := false
	_ = syncpb.Walk(raw, func(f syncpb.Field) error {
		if f.Num == syncpb.EventBatchProjectID || f.Num == syncpb.EventBatchHistorical {
			bad = bad || seen[f.Num] || f.Type != protowire.VarintType
			seen[f.Num] = true
		}
		return nil
	})
	return bad
}
