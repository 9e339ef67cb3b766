package capture

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flagedge/flagedge/shared/eventlog"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// JetStreamDestination delivers spool records to the event log: each record is published as
// one message on its project's subject of the stream eventlog.StreamName, and the delivery
// succeeds once the stream has acknowledged every message (stored, and replicated when the
// stream has replicas). Each message carries a Nats-Msg-Id made from its content, so records
// published again after a crash are de-duplicated by the stream.
type JetStreamDestination struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	edgeID string
	// Window is how many publishes of one batch are in flight at once: enough to keep a
	// link to the servers busy, few enough that a failure wastes little.
	Window int
}

// NewJetStreamDestination returns the destination publishing on nc as edgeID.
func NewJetStreamDestination(nc *nats.Conn, edgeID string) (*JetStreamDestination, error) {
	// Room for the forwarder's window of batches, each with up to Window publishes pending.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384))
	if err != nil {
		return nil, err
	}
	return &JetStreamDestination{nc: nc, js: js, edgeID: edgeID, Window: 1024}, nil
}

// Deliver publishes the records and waits for the stream's acknowledgements. A record larger
// than the servers take in one message is split into several, by events; an event that alone
// is too large is refused for good.
func (d *JetStreamDestination) Deliver(ctx context.Context, records [][]byte) error {
	return d.Send(ctx, records)(ctx)
}

// Send publishes the records asynchronously, in order, and returns the wait for the stream's
// acknowledgements of all of them. A batch of more than Window messages waits for each
// Window's acknowledgements before publishing the next, so that one batch never has more
// than Window publishes pending.
func (d *JetStreamDestination) Send(ctx context.Context, records [][]byte) func(context.Context) error {
	failed := func(err error) func(context.Context) error { return func(context.Context) error { return err } }
	// The servers' limit, less room for the headers and the subject.
	limit := int(d.nc.MaxPayload()) - 1024
	if d.nc.MaxPayload() == 0 { // not connected yet: the limit is unknown
		return failed(errors.New("event log: not connected to NATS"))
	}
	msgs := make([]*nats.Msg, 0, len(records))
	for _, r := range records {
		payloads, project, err := splitRecord(r, limit)
		if err != nil {
			return failed(Permanent(err))
		}
		for _, p := range payloads {
			m := nats.NewMsg(eventlog.Subject(project))
			m.Data = p
			m.Header.Set(eventlog.HeaderEdgeID, d.edgeID)
			msgs = append(msgs, m)
		}
	}
	futures := make([]jetstream.PubAckFuture, 0, min(len(msgs), d.Window))
	for i, m := range msgs {
		if i > 0 && i%d.Window == 0 {
			if err := awaitAcks(ctx, futures); err != nil {
				return failed(err)
			}
			futures = futures[:0]
		}
		f, err := d.js.PublishMsgAsync(m, jetstream.WithMsgID(eventlog.MsgID(m.Data)), jetstream.WithExpectStream(eventlog.StreamName))
		if err != nil {
			return failed(fmt.Errorf("event log: publish: %w", err))
		}
		futures = append(futures, f)
	}
	return func(ctx context.Context) error { return awaitAcks(ctx, futures) }
}

// awaitAcks waits for every publish's acknowledgement, failing at the first refused.
func awaitAcks(ctx context.Context, futures []jetstream.PubAckFuture) error {
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("event log: publish: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// splitRecord returns the record as the message payloads to publish and the project they
// belong to: the record itself when it fits in limit bytes, else encoded EventBatch messages
// holding its events in order, each within limit. The split is deterministic, so a record
// published again gives the same messages and message ids. A record whose project cannot be
// read is published whole on project 0: the control plane dead-letters what it cannot decode.
func splitRecord(record []byte, limit int) ([][]byte, int64, error) {
	var project int64
	var head []byte     // every field but the events, kept as written
	var events [][]byte // each event field, tag included
	ok := syncpb.Walk(record, func(f syncpb.Field) error {
		switch {
		case f.Num == syncpb.EventBatchProjectID && f.Type == protowire.VarintType:
			project = int64(f.Varint)
			head = append(head, f.Raw...)
		case f.Num == syncpb.EventBatchEvents:
			events = append(events, f.Raw)
		default:
			head = append(head, f.Raw...)
		}
		return nil
	}) == nil
	if !ok {
		project = 0
	}
	if len(record) <= limit {
		return [][]byte{record}, project, nil
	}
	if !ok {
		return nil, 0, fmt.Errorf("event log: a malformed spool record of %d bytes is larger than the %d bytes NATS takes", len(record), limit)
	}
	var out [][]byte
	cur := append([]byte(nil), head...)
	n := 0
	for _, e := range events {
		if len(head)+len(e) > limit {
			return nil, 0, fmt.Errorf("event log: an event of %d bytes is larger than the %d bytes NATS takes in a message (raise the servers' max_payload)", len(e), limit)
		}
		if len(cur)+len(e) > limit {
			out = append(out, cur)
			cur, n = append([]byte(nil), head...), 0
		}
		cur = append(cur, e...)
		n++
	}
	if n > 0 {
		out = append(out, cur)
	}
	return out, project, nil
}
