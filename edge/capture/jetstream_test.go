package capture_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/internal/natstest"
	"github.com/flagedge/flagedge/shared/eventlog"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// TestJetStreamDestination publishes through the forwarder to a real 3-node cluster whose
// servers take messages of at most 64 KiB: small records arrive as one message each on their
// project's subject, a 200 KiB record is split by events into several messages that together
// hold all its events in order, an event too large for any message is dead-lettered at the
// edge and the queue moves on, and delivering the same records again adds no message (the
// stream de-duplicates by the content-hash message id).
func TestJetStreamDestination(t *testing.T) {
	cluster := natstest.New(t, natstest.Options{MaxPayload: 64 << 10})
	nc, err := eventlog.Config{URL: cluster.URL()}.Connect("edge test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// What the control plane creates at start (controlplane/logingest), in brief.
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: eventlog.StreamName, Subjects: []string{eventlog.Subjects},
		Replicas: 3, Duplicates: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	dest, err := capture.NewJetStreamDestination(nc, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	path := forward(t, dest, &instantClock{}, "a", "big:200", "huge", "b")
	if got := deadLetterNames(t, path); len(got) != 1 || got[0] != "huge" {
		t.Errorf("dead letters %v, want [huge]", got)
	}

	var cons jetstream.Consumer
	for ctx.Err() == nil { // the consumer's set-up may meet a leader election; retried
		if cons, err = js.OrderedConsumer(ctx, eventlog.StreamName, jetstream.OrderedConsumerConfig{}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var messages int
	for range info.State.Msgs {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		for try := 0; errors.Is(err, nats.ErrNoResponders) && try < 20; try++ {
			// The stream's leader moving on a loaded machine: the ordered consumer recreates
			// itself on the next call.
			time.Sleep(100 * time.Millisecond)
			m, err = cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		}
		if err != nil {
			t.Fatal(err)
		}
		messages++
		if len(m.Data()) > 64<<10 || m.Subject() != eventlog.Subject(1) || m.Headers().Get(eventlog.HeaderEdgeID) != "edge-1" {
			t.Errorf("message of %d bytes on %s from %q", len(m.Data()), m.Subject(), m.Headers().Get(eventlog.HeaderEdgeID))
		}
		var b syncpb.EventBatch
		if err := proto.Unmarshal(m.Data(), &b); err != nil || b.ProjectId != 1 {
			t.Fatalf("message is no EventBatch of project 1: %v", err)
		}
		for _, e := range b.Events {
			names = append(names, e.Event)
		}
	}
	if len(names) != 202 || names[0] != "a" || names[1] != "big-0" || names[200] != "big-199" || names[201] != "b" {
		t.Errorf("%d events arrived (first %v), want a, big-0…big-199, b", len(names), names[:min(3, len(names))])
	}
	if messages < 5 {
		t.Errorf("%d messages: the 200 KiB record was not split", messages)
	}

	// The same records again, as after a crash before the spool recorded the acknowledgement.
	if err := dest.Deliver(ctx, [][]byte{recordOf("a"), recordOf("big:200"), recordOf("b")}); err != nil {
		t.Fatal(err)
	}
	again, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.State.Msgs != info.State.Msgs {
		t.Errorf("republishing grew the stream from %d to %d messages", info.State.Msgs, again.State.Msgs)
	}
	t.Logf("4 records: %d messages (the 200 KiB record split), 1 event dead-lettered at the edge; republished: still %d", messages, again.State.Msgs)
}
