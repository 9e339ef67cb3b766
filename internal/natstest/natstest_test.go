package natstest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flagedge/flagedge/internal/natstest"
)

// TestClusterSurvivesAKilledNode: a stream replicated on the three nodes takes publishes at
// once after start, keeps taking them with one node killed, and the node comes back from its
// store.
func TestClusterSurvivesAKilledNode(t *testing.T) {
	c := natstest.New(t, natstest.Options{})
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
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
	start := time.Now()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	t.Logf("stream created in %v", time.Since(start))
	publish := func(n int) {
		for i := range n {
			for {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := js.Publish(pctx, "t.x", []byte{byte(i)}, jetstream.WithMsgID(fmt.Sprint(i)))
				cancel()
				if err == nil {
					break
				} else if ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	publish(100)
	c.Kill(0)
	killed := time.Now()
	publish(200) // the first 100 again: de-duplicated by message id
	t.Logf("200 publishes (100 of them repeated) with a node killed took %v", time.Since(killed))
	if err := c.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 200 {
		t.Errorf("stream holds %d messages, want 200", n)
	}
}
